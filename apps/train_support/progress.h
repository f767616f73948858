// Training progress output. On a terminal: one progress bar per epoch, redrawn in place. Otherwise
// (logs, CI): plain lines with a timestamp, at most one per interval, and always the epoch's last.
// The line itself comes from a pure function, format_progress, so its content is testable.
//
//   ProgressPrinter progress(stderr);
//   progress.update({.epoch = 1, .epochs = 90, .step = i, .steps = n, .loss = l, .top1 = acc, ...});
//   progress.finish_epoch(last_stats);
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

namespace nabla::train_support {

struct ProgressStats {
  int64_t epoch = 1;  // 1-based
  int64_t epochs = 1;
  int64_t step = 0;   // steps done in this epoch
  int64_t steps = 0;  // steps in this epoch; 0 when unknown (no bar, no ETA)
  double loss = std::numeric_limits<double>::quiet_NaN();
  double top1 = std::numeric_limits<double>::quiet_NaN();  // fraction in [0, 1]
  double lr = 0;
  double images_per_second = 0;
  double data_wait_fraction = 0;  // share of the step time spent waiting for the next batch
  int64_t gpu_memory_bytes = -1;  // < 0: no GPU, the field is left out
  double elapsed_seconds = 0;     // since the epoch started
};

struct ProgressFormat {
  int bar_width = 0;  // > 0: draw a bar of this many cells instead of "step i/n"
};

// "12:03:04" for hours, "3:04" below an hour; "?" for a negative or non-finite time.
std::string format_duration(double seconds);
// "512 B", "1.5 KiB", "12.3 GiB".
std::string format_bytes(int64_t bytes);
// Seconds left in the epoch at the rate so far; negative when unknown (no step done, no total).
double eta_seconds(const ProgressStats& stats);

// One line, no newline. Unknown values (NaN loss or top-1, no GPU) are left out.
std::string format_progress(const ProgressStats& stats, const ProgressFormat& format = {});

struct ProgressPrinterOptions {
  double line_interval_seconds = 10;     // plain mode: at most one line per interval
  double redraw_interval_seconds = 0.2;  // terminal mode: at most this often
  int bar_width = 30;
};

class ProgressPrinter {
 public:
  // Draws bars when `out` is a terminal (and TERM is not "dumb"), plain lines otherwise.
  explicit ProgressPrinter(std::FILE* out, const ProgressPrinterOptions& options = {});
  ProgressPrinter(std::FILE* out, bool terminal, const ProgressPrinterOptions& options = {});

  // `now_seconds` is any monotonic clock (the default reads steady_clock); tests pass their own.
  void update(const ProgressStats& stats);
  void update(const ProgressStats& stats, double now_seconds);
  // Prints the epoch's final state and ends the line (a bar stays on screen).
  void finish_epoch(const ProgressStats& stats);

  bool terminal() const { return terminal_; }

 private:
  void emit(const ProgressStats& stats, bool final_line);

  std::FILE* out_;
  bool terminal_;
  ProgressPrinterOptions options_;
  double last_print_ = -std::numeric_limits<double>::infinity();
  int64_t last_epoch_ = -1;
};

}  // namespace nabla::train_support
