// CUDA max/min, with or without the int64 index of the winner (launcher behind reduce() and
// reduce_with_index() in reduce/layout.cpp). NaN beats every number; equal values keep the
// lowest position, which combine() settles by comparing positions, so the order in which lanes,
// warps and splits meet does not matter.
#include "nabla/ops/cuda/reduce/launch.cuh"

namespace nabla::ops::cuda {

namespace {

template <typename C>
__device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename T, bool IsMax, bool WithIndex>
struct ExtremeOp {
  using In = T;
  using C = opmath_t<T>;  // float for float16/bfloat16; the type itself otherwise
  struct Acc {
    C value;
    int64_t index;  // -1: nothing seen yet
  };
  T* values;
  int64_t* indices;  // used when WithIndex

  static __device__ __forceinline__ bool better(C x, C best) {
    if (is_nan(best)) return false;
    if (is_nan(x)) return true;
    return IsMax ? x > best : x < best;
  }
  __device__ Acc init() const { return {C(), -1}; }
  __device__ void update(Acc& a, T v, int64_t r) const {
    const C x = load_as_opmath(v);
    if (a.index < 0 || better(x, a.value)) a = {x, r};
  }
  __device__ Acc combine(const Acc& a, const Acc& b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    if (better(b.value, a.value)) return b;
    if (better(a.value, b.value)) return a;
    return a.index <= b.index ? a : b;
  }
  __device__ void write(int64_t k, const Acc& a) const {
    values[k] = store_from<T>(a.value);
    if constexpr (WithIndex) indices[k] = a.index;
  }
};

template <typename T, bool IsMax>
void launch_extreme(const ReduceLayout& layout, T* values, int64_t* indices) {
  if (indices) {
    reduction::launch(ExtremeOp<T, IsMax, true>{values, indices}, layout);
  } else {
    reduction::launch(ExtremeOp<T, IsMax, false>{values, nullptr}, layout);
  }
}

}  // namespace

void reduce_extreme(const ReduceLayout& layout, bool is_max, const Tensor& values, const Tensor& indices) {
  dispatch_device(layout.input.dtype(), is_max ? "max" : "min", [&]<typename T>() {
    T* v = static_cast<T*>(values.data_ptr());
    int64_t* i = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;
    if (is_max) {
      launch_extreme<T, true>(layout, v, i);
    } else {
      launch_extreme<T, false>(layout, v, i);
    }
  });
}

}  // namespace nabla::ops::cuda
