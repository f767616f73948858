// The thread-local autocast state and its cast cache (see core/autocast.h).
//
// The cache is keyed by the source TensorImpl and keeps the source alive, so a key's address
// cannot be reused by another tensor while its entry exists. Entries die with the outermost
// scope, which also frees the lower-precision copies (and the graph edges they carry).
#include "nabla/core/autocast.h"

#include <map>
#include <tuple>

namespace nabla::autocast {

namespace {

struct CacheEntry {
  Tensor source;  // keeps the key's impl alive
  uint32_t version;
  Tensor cast;
};
using CacheKey = std::tuple<const TensorImpl*, DType, bool>;

struct ThreadState {
  State state;
  int depth = 0;
  std::optional<DType> last_enabled;
  uint64_t enabled_scopes = 0;
  std::map<CacheKey, CacheEntry> cache;
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
  if (--s.depth == 0) s.cache.clear();
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

int64_t cast_cache_size() {
  return static_cast<int64_t>(local().cache.size());
}

void clear_cast_cache() {
  local().cache.clear();
}

}  // namespace nabla::autocast
