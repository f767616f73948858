#include "nabla/apps/train_support/progress.h"

#include <unistd.h>

#include <fmt/format.h>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "nabla/core/memory_category.h"

namespace nabla::train_support {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 0) return fmt::format("{} B", bytes);
  return nabla::format_bytes(static_cast<size_t>(bytes), 1);  // core's, to one decimal
}

double eta_seconds(const ProgressStats& stats) {
  if (stats.step <= 0 || stats.steps <= 0 || stats.elapsed_seconds < 0) return -1;
  return stats.elapsed_seconds * static_cast<double>(std::max<int64_t>(stats.steps - stats.step, 0)) /
         static_cast<double>(stats.step);
}

std::string format_progress(const ProgressStats& s, const ProgressFormat& format) {
  std::string line = fmt::format("epoch {}/{} ", s.epoch, s.epochs);
  if (format.bar_width > 0 && s.steps > 0) {
    const int64_t filled = std::clamp<int64_t>(s.step * format.bar_width / s.steps, 0, format.bar_width);
    line += "[" + std::string(filled, '#') + std::string(format.bar_width - filled, '.') + "] ";
    line += fmt::format("{}/{}", s.step, s.steps);
  } else {
    line += s.steps > 0 ? fmt::format("step {}/{}", s.step, s.steps) : fmt::format("step {}", s.step);
  }
  if (std::isfinite(s.loss)) line += fmt::format(" loss {:.4f}", s.loss);
  if (std::isfinite(s.top1)) line += fmt::format(" top1 {:.2f}%", 100 * s.top1);
  line += fmt::format(" lr {:.4g} {:.0f} img/s data {:.0f}%", s.lr, s.images_per_second,
                      100 * s.data_wait_fraction);
  if (s.gpu_memory_bytes >= 0) line += " mem " + format_bytes(s.gpu_memory_bytes);
  line += " elapsed " + format_duration(s.elapsed_seconds);
  if (eta_seconds(s) >= 0) line += " eta " + format_duration(eta_seconds(s));
  return line;
}

namespace {

bool is_terminal(std::FILE* out) {
  const char* term = std::getenv("TERM");
  return ::isatty(::fileno(out)) == 1 && !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "2026-11-30 20:31:02" in UTC, the prefix of plain lines.
std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace

ProgressPrinter::ProgressPrinter(std::FILE* out, const ProgressPrinterOptions& options)
    : ProgressPrinter(out, is_terminal(out), options) {}

ProgressPrinter::ProgressPrinter(std::FILE* out, bool terminal, const ProgressPrinterOptions& options)
    : out_(out), terminal_(terminal), options_(options) {}

void ProgressPrinter::update(const ProgressStats& stats) {
  update(stats, steady_seconds());
}

void ProgressPrinter::update(const ProgressStats& stats, double now_seconds) {
  const double interval = terminal_ ? options_.redraw_interval_seconds : options_.line_interval_seconds;
  // A new epoch prints at once, so every epoch's first state is seen.
  if (stats.epoch == last_epoch_ && now_seconds - last_print_ < interval) return;
  last_print_ = now_seconds;
  last_epoch_ = stats.epoch;
  emit(stats, false);
}

void ProgressPrinter::finish_epoch(const ProgressStats& stats) {
  emit(stats, true);
  last_epoch_ = -1;
}

void ProgressPrinter::emit(const ProgressStats& stats, bool final_line) {
  if (terminal_) {
    // Carriage return, the line, then erase whatever a longer previous line left behind.
    std::string line = "\r" + format_progress(stats, {.bar_width = options_.bar_width}) + "\x1b[K";
    if (final_line) line += "\n";
    std::fputs(line.c_str(), out_);
  } else {
    std::fputs(fmt::format("[{}] {}\n", utc_timestamp(), format_progress(stats)).c_str(), out_);
  }
  std::fflush(out_);
}

}  // namespace nabla::train_support
