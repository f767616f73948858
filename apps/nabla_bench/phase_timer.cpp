#include "nabla_bench/phase_timer.h"

#include <fmt/format.h>

#include <algorithm>

#include "nabla/core/error.h"

namespace nabla::bench {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

PhaseTimer::PhaseTimer(std::vector<std::string> phases, int steps, int device)
    : phases_(std::move(phases)), device_(device) {
  NABLA_CHECK(!phases_.empty() && steps > 0, "PhaseTimer: needs at least one phase and one step");
  events_.resize(static_cast<size_t>(steps));
  host_.resize(static_cast<size_t>(steps));
  for (auto& row : events_) row.reserve(phases_.size() + 1);
  for (auto& row : host_) row.reserve(phases_.size() + 1);
}

void PhaseTimer::begin_step() {
  NABLA_CHECK(step_ + 1 < static_cast<int>(events_.size()),
              "PhaseTimer: more steps than the {} it was made for", events_.size());
  ++step_;
  mark();
}

void PhaseTimer::mark() {
  NABLA_CHECK(step_ >= 0, "PhaseTimer: mark() before begin_step()");
  auto& row = events_[static_cast<size_t>(step_)];
  NABLA_CHECK(row.size() <= phases_.size(), "PhaseTimer: more marks than the {} phases", phases_.size());
  // An event's CUDA handle is made at its first record: a host call of a few microseconds.
  row.emplace_back(/*enable_timing=*/true);
  row.back().record(cuda::current_stream(device_));
  host_[static_cast<size_t>(step_)].push_back(Clock::now());
}

nlohmann::json PhaseTimer::summary() const {
  const size_t steps = static_cast<size_t>(step_ + 1);
  nlohmann::json out = nlohmann::json::object();
  for (size_t s = 0; s < steps; ++s) {
    NABLA_CHECK(events_[s].size() == phases_.size() + 1, "PhaseTimer: step {} has {} marks, expected {}", s,
                events_[s].size(), phases_.size() + 1);
  }
  for (size_t p = 0; p < phases_.size(); ++p) {
    std::vector<double> device, host;
    for (size_t s = 0; s < steps; ++s) {
      device.push_back(events_[s][p].elapsed_ms(events_[s][p + 1]));
      host.push_back(std::chrono::duration<double, std::milli>(host_[s][p + 1] - host_[s][p]).count());
    }
    out[phases_[p]] = {{"device_ms", median(device)}, {"host_ms", median(host)}};
  }
  std::vector<double> gap;
  for (size_t s = 0; s + 1 < steps; ++s) gap.push_back(events_[s].back().elapsed_ms(events_[s + 1].front()));
  out["between_steps"] = {{"device_ms", median(gap)}};
  return out;
}

std::string PhaseTimer::report() const {
  const nlohmann::json j = summary();
  std::string text = "phases, median ms per step (device / host):";
  for (const auto& p : phases_) {
    text += fmt::format(" {} {:.2f} / {:.2f},", p, j[p]["device_ms"].get<double>(),
                        j[p]["host_ms"].get<double>());
  }
  text += fmt::format(" between steps {:.2f} (device)", j["between_steps"]["device_ms"].get<double>());
  return text;
}

}  // namespace nabla::bench
