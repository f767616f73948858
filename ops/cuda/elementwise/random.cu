// CUDA random kernels: uniform, normal, randint and Bernoulli masks from Philox4x32-10.
//
// Element i maps to a Philox counter block and lane exactly as in ops/cpu/fill_copy.cpp (see
// core/philox.h), so a seed gives the same tensor on the CPU and on CUDA: uniform, randint and
// bernoulli bit for bit; normal to the last bit of double precision of the CPU's libm (the
// float result almost always rounds identically). One thread computes one Philox block and
// writes the 2 or 4 elements it feeds. Arithmetic that the CPU does in double is done here with
// __dadd_rn/__dmul_rn, so nvcc cannot contract it into an FMA that rounds differently.
//
// Outputs are contiguous (the factories pass a flat view of a dense tensor).
#include "nabla/core/philox.h"
#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/elementwise/kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr double kPi = 3.14159265358979323846;

struct Counter {
  uint64_t seed, offset;
  const uint64_t* graph_state;  // null, or {seed, base offset} in device memory (PhiloxState)
  // The counter this launch draws from: a graph's replay reads its seed and base offset here.
  __device__ __forceinline__ Counter resolved() const {
    if (graph_state == nullptr) return *this;
    return {graph_state[0], graph_state[1] + offset, nullptr};
  }
  __device__ __forceinline__ philox::Block block(int64_t b) const {
    return philox::philox4x32_10(offset + static_cast<uint64_t>(b), seed);
  }
};

// Runs body(block_index) for every counter block covering n elements at `per_block` each.
template <int kPerBlock, typename Body>
__device__ __forceinline__ void for_each_block(int64_t n, Body body) {
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += grid)
    body(b);
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    uniform_kernel(T* out, int64_t n, Counter launch_counter, double low, double range) {
  const Counter counter = launch_counter.resolved();
  if constexpr (std::is_same_v<T, double>) {
    // Two lanes (53 bits) per double: block b feeds elements 2b and 2b + 1.
    for_each_block<2>(n, [&](int64_t b) {
      philox::Block r = counter.block(b);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        int64_t i = 2 * b + e;
        if (i < n) {
          double u = philox::to_uniform_double(r.v[2 * e], r.v[2 * e + 1]);
          out[i] = __dadd_rn(low, __dmul_rn(range, u));
        }
      }
    });
  } else {
    for_each_block<4>(n, [&](int64_t b) {
      philox::Block r = counter.block(b);
#pragma unroll
      for (int lane = 0; lane < 4; ++lane) {
        int64_t i = 4 * b + lane;
        if (i < n) {
          double u = philox::to_uniform_float(r.v[lane]);
          out[i] = store_from<T>(static_cast<float>(__dadd_rn(low, __dmul_rn(range, u))));
        }
      }
    });
  }
}

// Box-Muller on the four lanes of a block: lanes (0, 1) give elements 4b, 4b + 1 and lanes
// (2, 3) give 4b + 2, 4b + 3 (cosine for even elements, sine for odd).
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    normal_kernel(T* out, int64_t n, Counter launch_counter, double mean, double stddev) {
  const Counter counter = launch_counter.resolved();
  for_each_block<4>(n, [&](int64_t b) {
    philox::Block r = counter.block(b);
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      int64_t i = 4 * b + 2 * pair;
      if (i >= n) break;
      double u1 = 1.0 - static_cast<double>(philox::to_uniform_float(r.v[pair * 2]));
      double u2 = philox::to_uniform_float(r.v[pair * 2 + 1]);
      double radius = ::sqrt(__dmul_rn(-2.0, ::log(u1)));
      double angle = __dmul_rn(2.0 * kPi, u2);
      double z0 = __dmul_rn(radius, ::cos(angle));
      out[i] = store_from<T>(static_cast<opmath_t<T>>(__dadd_rn(mean, __dmul_rn(stddev, z0))));
      if (i + 1 < n) {
        double z1 = __dmul_rn(radius, ::sin(angle));
        out[i + 1] = store_from<T>(static_cast<opmath_t<T>>(__dadd_rn(mean, __dmul_rn(stddev, z1))));
      }
    }
  });
}

// 64 random bits per element (two lanes), mapped onto [0, range) by multiply-shift.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    randint_kernel(T* out, int64_t n, Counter launch_counter, int64_t low, uint64_t range) {
  const Counter counter = launch_counter.resolved();
  for_each_block<2>(n, [&](int64_t b) {
    philox::Block r = counter.block(b);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      int64_t i = 2 * b + e;
      if (i < n) {
        uint64_t bits = (static_cast<uint64_t>(r.v[2 * e]) << 32) | r.v[2 * e + 1];
        uint64_t v = __umul64hi(bits, range);
        out[i] = store_from<T>(static_cast<opmath_t<T>>(low + static_cast<int64_t>(v)));
      }
    }
  });
}

// 1 where the lane's uniform float is below p, else 0.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    bernoulli_kernel(T* out, int64_t n, Counter launch_counter, double p) {
  const Counter counter = launch_counter.resolved();
  for_each_block<4>(n, [&](int64_t b) {
    philox::Block r = counter.block(b);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      int64_t i = 4 * b + lane;
      if (i < n) {
        bool hit = static_cast<double>(philox::to_uniform_float(r.v[lane])) < p;
        if constexpr (std::is_same_v<T, bool>) {
          out[i] = hit;
        } else {
          out[i] = store_from<T>(static_cast<opmath_t<T>>(hit ? 1 : 0));
        }
      }
    }
  });
}

// Launches `kernel` over the counter blocks of a contiguous `out`.
template <typename T, typename Kernel, typename... Args>
void launch_random(const Tensor& out, int per_block, Kernel kernel, Args... args) {
  NABLA_ASSERT(out.is_contiguous(), "CUDA random kernels need a contiguous output, got {}", describe(out));
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceScope device(out.device().index);
  kernel<<<blocks_for((n + per_block - 1) / per_block), kBlockSize, 0, stream_for(out)>>>(
      static_cast<T*>(out.data_ptr()), n, args...);
  NABLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void uniform(const Tensor& out, PhiloxState state, double low, double high) {
  dispatch_device<TypeSet::Floating>(out.dtype(), "rand", [&]<typename T>() {
    Counter counter{state.seed, state.offset, state.graph_state};
    launch_random<T>(out, std::is_same_v<T, double> ? 2 : 4, uniform_kernel<T>, counter, low, high - low);
  });
}

void normal(const Tensor& out, PhiloxState state, double mean, double stddev) {
  dispatch_device<TypeSet::Floating>(out.dtype(), "randn", [&]<typename T>() {
    launch_random<T>(out, 4, normal_kernel<T>, Counter{state.seed, state.offset, state.graph_state}, mean,
                     stddev);
  });
}

void randint(const Tensor& out, PhiloxState state, int64_t low, int64_t high) {
  const auto range = static_cast<uint64_t>(high - low);
  dispatch_device<TypeSet::FloatingAndIntegral>(out.dtype(), "randint", [&]<typename T>() {
    launch_random<T>(out, 2, randint_kernel<T>, Counter{state.seed, state.offset, state.graph_state}, low,
                     range);
  });
}

void bernoulli(const Tensor& out, PhiloxState state, double p) {
  dispatch_device(out.dtype(), "bernoulli", [&]<typename T>() {
    launch_random<T>(out, 4, bernoulli_kernel<T>, Counter{state.seed, state.offset, state.graph_state}, p);
  });
}

}  // namespace nabla::ops::cuda
