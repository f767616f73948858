// The JSONL metrics file of a training run: one JSON object per line, flushed after each line,
// so `tail -f`, jq and pandas.read_json(lines=True) can read it while the run goes on.
//
//   MetricsWriter metrics("runs/rn50/metrics.jsonl");
//   metrics.write({{"event", "train"}, {"epoch", 3}, {"step", 1200}, {"loss", 1.93}, {"lr", 0.1}});
//
// Non-finite numbers (a diverged loss) are written as null, which keeps every line valid JSON.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace nabla::train_support {

struct MetricsWriterOptions {
  bool append = false;  // keep existing lines (a resumed run continues its file)
};

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path, const MetricsWriterOptions& options = {});

  // Writes `record` (a JSON object) as one line and flushes.
  void write(const nlohmann::json& record);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
};

}  // namespace nabla::train_support
