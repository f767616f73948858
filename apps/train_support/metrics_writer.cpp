#include "nabla/apps/train_support/metrics_writer.h"

#include <filesystem>

#include "nabla/core/error.h"

namespace nabla::train_support {

MetricsWriter::MetricsWriter(const std::string& path, const MetricsWriterOptions& options)
    : path_(path), file_(nullptr, &std::fclose) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  NABLA_CHECK(!ec, "MetricsWriter: cannot create the directory '{}': {}", parent.string(), ec.message());
  file_.reset(std::fopen(path.c_str(), options.append ? "ab" : "wb"));
  NABLA_CHECK(file_ != nullptr, "MetricsWriter: cannot open '{}' for writing", path);
}

void MetricsWriter::write(const nlohmann::json& record) {
  NABLA_CHECK(record.is_object(), "MetricsWriter::write: a metrics record must be a JSON object, got {}",
              record.type_name());
  // dump() without indentation never emits a newline (strings escape theirs), so one record is one
  // line; invalid UTF-8 in a string is replaced instead of throwing mid-run.
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  bool ok = std::fwrite(line.data(), 1, line.size(), file_.get()) == line.size();
  ok = ok && std::fflush(file_.get()) == 0;
  NABLA_CHECK(ok, "MetricsWriter: cannot write to '{}' (disk full?)", path_);
}

}  // namespace nabla::train_support
