// NABLA_SAVED_REPORT: the saved tensors of a step and the node of its backward's peak (see
// ops/autograd/detail/saved_report.h).
#include "nabla/ops/autograd/detail/saved_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "nabla/core/memory_category.h"

namespace nabla::autograd::detail {

namespace {

struct Saved {
  const char* leaf;  // "(a leaf) " for parameters and inputs, else ""
  const char* node;
  std::weak_ptr<Storage> storage;  // weak: noting a save must not keep its memory alive
  size_t bytes;
  DType dtype;
  Shape sizes;
  bool recipe;
};

struct State {
  std::vector<Saved> saved;
  std::string saved_table;  // the saved set, summed when the backward began
  Device device;
  size_t start_bytes = 0, peak_before = 0, peak = 0;
  std::string peak_node;  // empty: the backward never passed the peak before it
  int nodes = 0, peak_index = 0;
  bool tracked = true;  // false: the allocator does not count (the native CUDA backend)
  bool in_backward = false;
};

thread_local State t_state;
std::atomic<int> g_enabled{-1};  // set by a test (0 or 1), else -1: the environment's

// The saved set still alive, each storage once, summed by (node, dtype, shape), largest first.
std::string summarize(const std::vector<Saved>& saved) {
  std::set<const Storage*> seen;
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<int, size_t>> rows;
  size_t total = 0;
  int recipes = 0, shared = 0;
  for (const Saved& s : saved) {
    if (s.recipe) {
      ++recipes;
      continue;
    }
    const std::shared_ptr<Storage> storage = s.storage.lock();
    if (!storage) continue;
    if (!seen.insert(storage.get()).second) {
      ++shared;
      continue;
    }
    auto& row = rows[{std::string(s.leaf) + s.node, std::string(dtype_name(s.dtype)), shape_str(s.sizes)}];
    ++row.first;
    row.second += s.bytes;
    total += s.bytes;
  }
  std::vector<std::pair<size_t, std::string>> lines;
  for (const auto& [key, row] : rows) {
    const auto& [node, dtype, shape] = key;
    lines.emplace_back(row.second, fmt::format("  {:>10}  {:>4} x {:<28} {:<9} {}\n",
                                               format_bytes(row.second), row.first, node, dtype, shape));
  }
  std::sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out = fmt::format(
      "saved for backward: {} in {} storages ({} more saves share one of them; {} values kept "
      "as recipes, no memory)\n",
      format_bytes(total), seen.size(), shared, recipes);
  for (const auto& line : lines) out += line.second;
  return out;
}

}  // namespace

bool saved_report_enabled() {
  if (const int set = g_enabled.load(std::memory_order_relaxed); set >= 0) return set == 1;
  static const bool from_env = [] {
    const char* v = std::getenv("NABLA_SAVED_REPORT");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return from_env;
}

void set_saved_report(bool enabled) {
  g_enabled.store(enabled ? 1 : 0, std::memory_order_relaxed);
  t_state = State{};
}

void note_saved(const char* node, const Tensor& t, bool recipe) {
  if (!t.defined()) return;
  // Forward passes with no backward (evaluation with grad on) would grow the list without end:
  // now and then drop the saves whose memory is gone (a recipe keeps no memory to tell by, so
  // recipes stay: a few dozen bytes each).
  auto& saved = t_state.saved;
  if (saved.size() >= 65536 && (saved.size() & (saved.size() - 1)) == 0)
    std::erase_if(saved, [](const Saved& e) { return !e.recipe && e.storage.expired(); });
  // A leaf that requires grad is a parameter (or an input): kept by the model anyway.
  const bool leaf = t.requires_grad() && !t.grad_fn();
  t_state.saved.push_back(
      {leaf ? "(a leaf) " : "", node, t.storage(), t.storage()->nbytes(), t.dtype(), t.sizes(), recipe});
}

BackwardReport::BackwardReport(Device device)
    : outermost_(!t_state.in_backward), exceptions_(std::uncaught_exceptions()) {
  if (!outermost_) return;
  State& s = t_state;
  s.in_backward = true;
  s.saved_table = summarize(s.saved);
  s.saved.clear();
  s.device = device;
  const MemoryCategoryStats stats = memory_category_stats(device);
  s.tracked = stats.tracked;
  s.start_bytes = stats.total;
  s.peak_before = s.peak = stats.peak_total;
  s.peak_node.clear();
  s.nodes = s.peak_index = 0;
}

void BackwardReport::after_node(const std::string& node) {
  if (!outermost_) return;
  State& s = t_state;
  ++s.nodes;
  const size_t peak = memory_category_stats(s.device).peak_total;
  if (peak > s.peak) {
    s.peak = peak;
    s.peak_node = node;
    s.peak_index = s.nodes;
  }
}

BackwardReport::~BackwardReport() {
  if (!outermost_) return;
  State& s = t_state;
  s.in_backward = false;
  if (std::uncaught_exceptions() > exceptions_) return;
  try {
    print();
  } catch (...) {  // a diagnostic never takes the backward down (formatting, a full stderr)
  }
}

void BackwardReport::print() const {
  const State& s = t_state;
  std::string out = fmt::format("NABLA_SAVED_REPORT, backward on {}: ", s.device.str());
  if (!s.tracked)
    out += "memory not tracked (the native allocator)\n";
  else if (s.peak_node.empty())
    out += fmt::format(
        "{} allocated when it began; peak {}, reached before the backward (since the last peak reset; the "
        "backward never passed it)\n",
        format_bytes(s.start_bytes), format_bytes(s.peak_before));
  else
    out += fmt::format("{} allocated when it began; peak {} (before it: {}), reached in node {} of {}, {}\n",
                       format_bytes(s.start_bytes), format_bytes(s.peak), format_bytes(s.peak_before),
                       s.peak_index, s.nodes, s.peak_node);
  out += s.saved_table;
  t_state.saved_table.clear();
  std::fputs(out.c_str(), stderr);
}

}  // namespace nabla::autograd::detail
