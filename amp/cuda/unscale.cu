// The GradScaler's fused unscale on CUDA: every float32 gradient multiplied by 1/scale in place,
// and one device flag raised when any result is inf or NaN. A launch carries a table of up to
// kMaxTensors (pointer, numel) pairs in its kernel argument (under the 4 KB limit); blockIdx.y
// picks the tensor and the x blocks grid-stride over it, as in optim/cuda/multi_tensor.cu. The
// scale and the flag stay on the device (GradScaler never waits for them during training).
#include <cuda_runtime.h>

#include <algorithm>

#include "nabla/amp/cuda/unscale.h"
#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/error.h"

namespace nabla::amp::cuda {

namespace {

constexpr int kMaxTensors = 200;
constexpr int kBlock = 256;
constexpr int64_t kMaxBlocksX = 1024;

struct Entry {
  float* data;
  int64_t numel;
};
struct Table {
  Entry entries[kMaxTensors];
};
static_assert(sizeof(Table) < 3800, "kernel arguments are limited to 4 KB");

__global__ void unscale_kernel(Table table, const float* inv_scale_ptr, float* found_inf) {
  const Entry e = table.entries[blockIdx.y];
  const float inv_scale = *inv_scale_ptr;
  bool bad = false;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < e.numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = e.data[i] * inv_scale;
    e.data[i] = v;
    bad |= !isfinite(v);
  }
  // Every writer stores the same value, so the race is benign; at most one store per thread.
  if (bad) *found_inf = 1.0f;
}

// Makes the device of `t` current for the scope and gives its current stream.
class DeviceScope {
 public:
  explicit DeviceScope(const Tensor& t)
      : guard_(t.device().index),
        stream_(static_cast<cudaStream_t>(nabla::cuda::current_stream(t.device().index).handle())) {}
  cudaStream_t stream() const { return stream_; }

 private:
  nabla::cuda::DeviceGuard guard_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

bool unscale_eligible(const Tensor& grad) {
  return grad.is_cuda() && grad.dtype() == kFloat32 &&
         is_non_overlapping_and_dense(grad.sizes(), grad.strides());
}

void multi_tensor_unscale(const TensorList& grads, const Tensor& inv_scale, const Tensor& found_inf) {
  NABLA_CHECK(found_inf.is_cuda() && found_inf.dtype() == kFloat32 && found_inf.numel() == 1,
              "multi_tensor_unscale: found_inf must be a 1-element float32 CUDA tensor, got {}",
              describe(found_inf));
  NABLA_CHECK(
      inv_scale.device() == found_inf.device() && inv_scale.dtype() == kFloat32 && inv_scale.numel() == 1,
      "multi_tensor_unscale: inv_scale must be a 1-element float32 tensor on {}, got {}",
      found_inf.device().str(), describe(inv_scale));
  for (const auto& g : grads) {
    NABLA_CHECK(unscale_eligible(g) && g.device() == found_inf.device(),
                "multi_tensor_unscale: needs dense float32 tensors on {}, got {}", found_inf.device().str(),
                describe(g));
  }
  if (grads.empty()) return;
  DeviceScope scope(found_inf);
  float* flag = static_cast<float*>(found_inf.data_ptr());
  for (size_t begin = 0; begin < grads.size(); begin += kMaxTensors) {
    const size_t end = std::min(grads.size(), begin + kMaxTensors);
    Table table{};
    int64_t max_numel = 0;
    for (size_t i = begin; i < end; ++i) {
      // The data pointer of a dense tensor is its lowest element whatever the memory order.
      table.entries[i - begin] = {static_cast<float*>(grads[i].data_ptr()), grads[i].numel()};
      max_numel = std::max(max_numel, grads[i].numel());
      grads[i].bump_version();
    }
    const int64_t blocks = std::clamp<int64_t>((max_numel + kBlock - 1) / kBlock, 1, kMaxBlocksX);
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(end - begin));
    unscale_kernel<<<grid, kBlock, 0, scope.stream()>>>(
        table, static_cast<const float*>(inv_scale.data_ptr()), flag);
    NABLA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nabla::amp::cuda
