// CPU kernels that create values: fill, copy with dtype conversion, arange, random numbers.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "nabla/core/philox.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cpu/loops.h"

namespace nabla::ops::cpu {
namespace {

// A value converted to Out for every input, as CUDA's conversion instructions do it: NaN becomes 0
// and a floating value beyond an integer type's range becomes its nearest bound (C++ leaves both
// undefined, and a damaged checkpoint or a user's tensor can hold them).
template <typename Out, typename V>
Out convert_to(V v) {
  if constexpr (std::is_integral_v<Out> && !std::is_same_v<Out, bool> && std::is_floating_point_v<V>) {
    if (std::isnan(v)) return Out(0);
    if (v >= static_cast<V>(std::numeric_limits<Out>::max())) return std::numeric_limits<Out>::max();
    if (v <= static_cast<V>(std::numeric_limits<Out>::min())) return std::numeric_limits<Out>::min();
  }
  return static_cast<Out>(static_cast<compute_t<Out>>(v));
}

}  // namespace

void fill(const Tensor& out, double value) {
  dispatch(out.dtype(), "fill", [&]<typename T>() {
    const T v = convert_to<T>(value);
    auto plan = make_plan<1>({&out});
    for_each_row<1>(plan, [&](std::array<char*, 1> p, int64_t n, const std::array<int64_t, 1>& s) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

void copy(const Tensor& src, const Tensor& dst) {
  dispatch(dst.dtype(), "copy", [&]<typename Out>() {
    dispatch(src.dtype(), "copy", [&]<typename In>() {
      auto plan = make_plan<2>({&dst, &src});
      for_each_row<2>(plan, [&](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
        if (s[0] == sizeof(Out) && s[1] == sizeof(In) && std::is_same_v<In, Out>) {
          std::memcpy(p[0], p[1], static_cast<size_t>(n) * sizeof(Out));
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          auto v = static_cast<compute_t<In>>(*reinterpret_cast<const In*>(p[1] + i * s[1]));
          if constexpr (std::is_same_v<Out, bool>) {
            *reinterpret_cast<Out*>(p[0] + i * s[0]) = v != compute_t<In>(0);
          } else {
            *reinterpret_cast<Out*>(p[0] + i * s[0]) = convert_to<Out>(v);
          }
        }
      });
    });
  });
}

// The element index of each position, for kernels whose value depends on it.
template <typename Fn>
void for_each_index(const Tensor& out, Fn fn) {
  // `out` is freshly allocated and contiguous, so position == linear index.
  NABLA_ASSERT(out.is_contiguous(), "index kernels need a contiguous output");
  const int64_t n = out.numel();
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

void arange(const Tensor& out, double start, double step) {
  dispatch<TypeSet::FloatingAndIntegral>(out.dtype(), "arange", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    for_each_index(out,
                   [&](int64_t i) { p[i] = static_cast<T>(static_cast<compute_t<T>>(start + step * i)); });
  });
}

// Element i uses block i / 4 and lane i % 4 (one Philox call per four floats). Doubles take two
// lanes each, so block i / 2.
void uniform(const Tensor& out, PhiloxState state, double low, double high) {
  dispatch<TypeSet::Floating>(out.dtype(), "rand", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    const double range = high - low;
    for_each_index(out, [&](int64_t i) {
      if constexpr (std::is_same_v<T, double>) {
        auto r = philox::philox4x32_10(state.offset + i / 2, state.seed);
        int lane = static_cast<int>(i % 2) * 2;
        p[i] = low + range * philox::to_uniform_double(r.v[lane], r.v[lane + 1]);
      } else {
        auto r = philox::philox4x32_10(state.offset + i / 4, state.seed);
        float u = philox::to_uniform_float(r.v[i % 4]);
        p[i] = static_cast<T>(static_cast<float>(low + range * u));
      }
    });
  });
}

// Box-Muller on the four lanes of one block: two pairs give four normals.
void normal(const Tensor& out, PhiloxState state, double mean, double stddev) {
  dispatch<TypeSet::Floating>(out.dtype(), "randn", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    for_each_index(out, [&](int64_t i) {
      auto r = philox::philox4x32_10(state.offset + i / 4, state.seed);
      int pair = static_cast<int>(i % 4) / 2;
      // 1 - u keeps the log argument in (0, 1].
      double u1 = 1.0 - philox::to_uniform_float(r.v[pair * 2]);
      double u2 = philox::to_uniform_float(r.v[pair * 2 + 1]);
      double radius = std::sqrt(-2.0 * std::log(u1));
      double angle = 2.0 * M_PI * u2;
      double z = (i % 2 == 0) ? radius * std::cos(angle) : radius * std::sin(angle);
      p[i] = static_cast<T>(static_cast<compute_t<T>>(mean + stddev * z));
    });
  });
}

void randint(const Tensor& out, PhiloxState state, int64_t low, int64_t high) {
  const uint64_t range = static_cast<uint64_t>(high - low);
  dispatch<TypeSet::FloatingAndIntegral>(out.dtype(), "randint", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    for_each_index(out, [&](int64_t i) {
      auto r = philox::philox4x32_10(state.offset + i / 2, state.seed);
      int lane = static_cast<int>(i % 2) * 2;
      uint64_t bits = (static_cast<uint64_t>(r.v[lane]) << 32) | r.v[lane + 1];
      // Multiply-shift maps 64 random bits onto [0, range) with negligible bias.
      uint64_t v = static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * range) >> 64);
      p[i] = static_cast<T>(static_cast<compute_t<T>>(low + static_cast<int64_t>(v)));
    });
  });
}

// Element i draws the uniform float of block i / 4, lane i % 4 (as uniform() does for floats).
void bernoulli(const Tensor& out, PhiloxState state, double p) {
  dispatch(out.dtype(), "bernoulli", [&]<typename T>() {
    T* ptr = out.data_ptr<T>();
    for_each_index(out, [&](int64_t i) {
      auto r = philox::philox4x32_10(state.offset + i / 4, state.seed);
      bool hit = static_cast<double>(philox::to_uniform_float(r.v[i % 4])) < p;
      if constexpr (std::is_same_v<T, bool>) {
        ptr[i] = hit;
      } else {
        ptr[i] = static_cast<T>(static_cast<compute_t<T>>(hit ? 1 : 0));
      }
    });
  });
}

}  // namespace nabla::ops::cpu
