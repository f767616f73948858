// The thread-local autocast state and its cast cache (see core/autocast.h).
//
// The cache is keyed by the source TensorImpl and keeps the source alive, so a key's address
// cannot be reused by another tensor while its entry exists. Entries die with the outermost
// scope, which also frees the lower-precision copies (and the graph edges they carry).
#include "nabla/core/autocast.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

namespace nabla::autocast {

namespace {

struct CacheEntry {
  Tensor source;  // keeps the key's impl alive
  uint32_t version;
  Tensor cast;
};
using CacheKey = std::tuple<const TensorImpl*, DType, bool>;

// Note [Activation casts]: a norm's output that feeds three projections (LLaMA's q, k and v; its
// gate and up projections) is cast to the lower precision once per linear under autocast, and
// each linear saves its copy for the backward: three casts and three saved copies of one value.
// torch.compile removes the duplicates as common subexpressions; here autocast remembers, for the
// scope, which tensor it cast to what, and hands the same cast to the next op that asks while
// the source is alive: the copies' memory and kernels go, and the linears' input gradients meet
// in the one cast's gradient (summed there, in its dtype, before one cast back). An entry holds
// its source weakly and the cast strongly (autograd saves a cast as a new tensor over its
// storage, so a weak reference to the cast would expire at once), and goes with the next cast
// after its source is freed: the cast then lives as long as the source did (or as long as the
// linears keep it), never the rest of the scope. A source freed and another tensor allocated at
// its address is told apart by the weak reference itself.
struct ActivationEntry {
  std::weak_ptr<TensorImpl> source;
  uint32_t version = 0;
  Tensor cast;
};

struct ThreadState {
  State state;
  int depth = 0;
  std::optional<DType> last_enabled;
  uint64_t enabled_scopes = 0;
  std::map<CacheKey, CacheEntry> cache;
  std::map<CacheKey, ActivationEntry> activations;
};

ThreadState& local() {
  thread_local ThreadState s;
  return s;
}

}  // namespace

State current() {
  return local().state;
}

void set_current(const State& state) {
  local().state = state;
}

void enter_scope() {
  ++local().depth;
}

void note_enabled_scope(DType dtype) {
  local().last_enabled = dtype;
  ++local().enabled_scopes;
}

uint64_t enabled_scope_count() {
  return local().enabled_scopes;
}

void exit_scope() {
  ThreadState& s = local();
  NABLA_ASSERT(s.depth > 0, "autocast: exit_scope without a matching enter_scope");
  if (--s.depth == 0) {
    s.cache.clear();
    s.activations.clear();
  }
}

int scope_depth() {
  return local().depth;
}

std::optional<DType> last_enabled_dtype() {
  return local().last_enabled;
}

Tensor cached_cast(const Tensor& source, DType dtype, bool with_grad) {
  auto& cache = local().cache;
  auto it = cache.find({source.impl(), dtype, with_grad});
  if (it == cache.end() || it->second.version != source.version()) return {};
  return it->second.cast;
}

void store_cast(const Tensor& source, DType dtype, bool with_grad, const Tensor& cast) {
  // Outside any scope (a state set by hand) nothing would ever clear the entry: do not cache.
  if (local().depth == 0) return;
  local().cache[{source.impl(), dtype, with_grad}] = CacheEntry{source, source.version(), cast};
}

Tensor cached_activation_cast(const Tensor& source, DType dtype, bool with_grad) {
  auto& cache = local().activations;
  auto it = cache.find({source.impl(), dtype, with_grad});
  if (it == cache.end()) return {};
  if (it->second.source.lock().get() != source.impl() || it->second.version != source.version()) return {};
  return it->second.cast;
}

void store_activation_cast(const Tensor& source, DType dtype, bool with_grad, const Tensor& cast) {
  ThreadState& s = local();
  if (s.depth == 0) return;
  // The casts of freed sources go now (the map holds the few live activations of a layer or so).
  std::erase_if(s.activations, [](const auto& e) { return e.second.source.expired(); });
  s.activations[{source.impl(), dtype, with_grad}] =
      ActivationEntry{.source = source.impl_ptr(), .version = source.version(), .cast = cast};
}

int64_t cast_cache_size() {
  return static_cast<int64_t>(local().cache.size());
}

void clear_cast_cache() {
  local().cache.clear();
}

}  // namespace nabla::autocast
