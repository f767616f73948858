#include "nabla/ops/fusion/compile.h"

#include <bit>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

namespace nabla::ops::fusion {

namespace {

void put(std::string& key, int64_t v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void put(std::string& key, double v) {
  put(key, std::bit_cast<int64_t>(v));
}

// Enough for every region of a few models' steps; past it the memo starts over.
constexpr size_t kMaxRegions = 4096;

// NABLA_FUSION_DUMP=<file>: each region planned for the first time is appended to the file with
// its plan, to see what a step's compiler fused and what it left (docs/design/step-compiler.md).
void dump_if_asked(const Region& region, const Plan& plan, size_t index) {
  const char* path = std::getenv("NABLA_FUSION_DUMP");
  if (path == nullptr || *path == '\0') return;
  std::ofstream out(path, std::ios::app);
  out << fmt::format("== region {}: {} ops\n", index, region.ops().size()) << region.dump() << dump(plan)
      << '\n';
}

}  // namespace

std::string region_key(const Region& region) {
  std::string key;
  key.reserve(64 * (region.values().size() + region.ops().size()));
  for (const Value& v : region.values()) {
    put(key, static_cast<int64_t>(v.dtype));
    put(key, static_cast<int64_t>(v.sizes.size()));
    for (int64_t s : v.sizes) put(key, s);
    for (int64_t s : v.strides) put(key, s);
    put(key, static_cast<int64_t>(v.producer) * 2 + (v.live_out ? 1 : 0));
  }
  for (const Op& op : region.ops()) {
    put(key, (static_cast<int64_t>(op.kind) << 16) | (static_cast<int64_t>(op.unary) << 8) |
                 static_cast<int64_t>(op.binary));
    put(key, op.params.a);
    put(key, op.params.b);
    put(key, op.alpha);
    put(key, static_cast<int64_t>(op.dims.size()) * 2 + (op.mean ? 1 : 0));
    for (int64_t d : op.dims) put(key, d);
    put(key, static_cast<int64_t>(op.args.size()));
    for (int a : op.args) put(key, static_cast<int64_t>(a));
  }
  return key;
}

std::shared_ptr<const CompiledRegion> compile_region(const Region& region) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const CompiledRegion>> memo;
  std::string key = region_key(region);
  {
    std::lock_guard lock(mutex);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  auto compiled = std::make_shared<CompiledRegion>();
  compiled->plan = plan_groups(region);
  compiled->kernels.resize(compiled->plan.groups.size());
  for (size_t g = 0; g < compiled->plan.groups.size(); ++g) {
    if (compiled->plan.groups[g].fused)
      compiled->kernels[g] = generate_kernel(region, compiled->plan.groups[g]);
  }
  std::lock_guard lock(mutex);
  static size_t planned = 0;
  dump_if_asked(region, compiled->plan, planned++);
  if (memo.size() >= kMaxRegions) memo.clear();
  memo.emplace(std::move(key), compiled);
  return compiled;
}

}  // namespace nabla::ops::fusion
