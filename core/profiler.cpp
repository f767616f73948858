#include "nabla/core/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"

namespace nabla::profiler {
namespace {

using Clock = std::chrono::steady_clock;

struct Call {
  int op = 0;         // index into State::names
  int device = -1;    // CUDA device, or -1
  size_t events = 0;  // index of the start event in its device's pool; the end is events + 1
  Clock::time_point host_start;
  double host_ms = 0;
  bool ended = false;  // its end was recorded in this session
};

// Reused from one recording to the next: an event belongs to the device it was created on.
struct Pool {
  std::vector<cuda::Event> events;
  size_t used = 0;
};

struct State {
  std::mutex mutex;
  std::vector<std::string> names;
  std::unordered_map<std::string, int> index;
  std::vector<Call> calls;
  std::unordered_map<int, Pool> pools;  // by CUDA device
  uint64_t session = 0;                 // start() counts up: a scope of an earlier one records nothing
};

std::atomic<bool> recording{false};
thread_local int depth = 0;

State& state() {
  static State* s = new State();  // leaked: scopes may end during static destruction
  return *s;
}

int intern(State& s, std::string_view op) {
  auto it = s.index.find(std::string(op));
  if (it != s.index.end()) return it->second;
  s.names.emplace_back(op);
  return s.index[s.names.back()] = static_cast<int>(s.names.size() - 1);
}

}  // namespace

namespace detail {

bool active() {
  return recording.load(std::memory_order_relaxed);
}

void Scope::begin(std::string_view op, int device) {
  if (depth != 0) {  // nested: the outermost scope owns this time
    ++depth;
    entered_ = true;
    return;
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  Call c{.op = intern(s, op), .device = device, .events = 0, .host_start = {}, .host_ms = 0, .ended = false};
  if (device >= 0) {
    if constexpr (kHasCuda) {
      Pool& pool = s.pools[device];
      if (pool.used + 2 > pool.events.size()) {
        pool.events.emplace_back(true);
        pool.events.emplace_back(true);
      }
      c.events = pool.used;
      pool.events[c.events].record(cuda::current_stream(device));  // may throw: nothing is counted yet
      pool.used += 2;
    }
  }
  c.host_start = Clock::now();
  call_ = static_cast<int64_t>(s.calls.size());
  session_ = s.session;
  s.calls.push_back(c);
  ++depth;
  entered_ = true;
}

void Scope::end() noexcept {
  if (--depth != 0 || call_ < 0) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (session_ != s.session || !recording.load()) return;  // stopped (and maybe restarted) meanwhile
  Call& c = s.calls[static_cast<size_t>(call_)];
  c.host_ms = std::chrono::duration<double, std::milli>(Clock::now() - c.host_start).count();
  if (c.device >= 0) {
    if constexpr (kHasCuda) {
      try {
        s.pools[c.device].events[c.events + 1].record(cuda::current_stream(c.device));
      } catch (...) {
        return;  // a device error is the op's to report, not the profiler's: this runs in a destructor
      }
    }
  }
  c.ended = true;
}

}  // namespace detail

void start() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  NABLA_CHECK(!recording.load(), "profiler::start: the profiler is already recording; call stop() first");
  s.calls.clear();
  for (auto& [device, pool] : s.pools) pool.used = 0;
  ++s.session;
  recording.store(true);
}

bool is_recording() {
  return recording.load();
}

Report stop() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  NABLA_CHECK(recording.load(), "profiler::stop: the profiler is not recording; call start() first");
  recording.store(false);
  Report report;
  std::vector<OpTime> totals(s.names.size());
  const Call* first_cuda = nullptr;
  const Call* last_cuda = nullptr;
  for (const Call& c : s.calls) {
    OpTime& t = totals[static_cast<size_t>(c.op)];
    t.calls += 1;
    t.host_ms += c.host_ms;
    if (c.device < 0) continue;
    if constexpr (kHasCuda) {
      if (!c.ended) continue;  // stop() ran inside this op
      const std::vector<cuda::Event>& events = s.pools[c.device].events;
      events[c.events + 1].synchronize();
      t.device_ms += events[c.events].elapsed_ms(events[c.events + 1]);
      if (first_cuda == nullptr) first_cuda = &c;
      last_cuda = &c;
    }
  }
  if constexpr (kHasCuda) {
    if (first_cuda != nullptr && first_cuda->device == last_cuda->device) {
      const std::vector<cuda::Event>& events = s.pools[first_cuda->device].events;
      report.span_ms = events[first_cuda->events].elapsed_ms(events[last_cuda->events + 1]);
    }
  }
  for (size_t i = 0; i < totals.size(); ++i) {
    if (totals[i].calls == 0) continue;
    totals[i].op = s.names[i];
    report.ops.push_back(std::move(totals[i]));
  }
  const bool by_device =
      std::any_of(report.ops.begin(), report.ops.end(), [](const OpTime& t) { return t.device_ms > 0; });
  std::sort(report.ops.begin(), report.ops.end(), [&](const OpTime& a, const OpTime& b) {
    return by_device ? a.device_ms > b.device_ms : a.host_ms > b.host_ms;
  });
  return report;
}

std::string table(const Report& report, size_t max_rows) {
  double device_total = 0, host_total = 0;
  for (const auto& t : report.ops) device_total += t.device_ms, host_total += t.host_ms;
  std::string out =
      fmt::format("{:<40} {:>8} {:>12} {:>7} {:>12}\n", "op", "calls", "device ms", "share", "host ms");
  for (size_t i = 0; i < report.ops.size() && i < max_rows; ++i) {
    const OpTime& t = report.ops[i];
    out += fmt::format("{:<40} {:>8} {:>12.3f} {:>6.1f}% {:>12.3f}\n", t.op.substr(0, 40), t.calls,
                       t.device_ms, device_total > 0 ? 100.0 * t.device_ms / device_total : 0.0, t.host_ms);
  }
  if (report.ops.size() > max_rows) out += fmt::format("... {} more ops\n", report.ops.size() - max_rows);
  out += fmt::format("{:<40} {:>8} {:>12.3f} {:>7} {:>12.3f}\n", "total", "", device_total, "", host_total);
  if (report.span_ms > 0) {
    out += fmt::format("device span {:.3f} ms: {:.1f}% of it inside timed ops\n", report.span_ms,
                       100.0 * device_total / report.span_ms);
  }
  return out;
}

}  // namespace nabla::profiler
