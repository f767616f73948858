// The GradScaler's fused unscale on CUDA: every float32 gradient multiplied by 1/scale in place,
// and one device flag raised when any result is inf or NaN, in tables of up to kMaxTensors
// gradients a launch (ops/cuda/elementwise/tensor_table.cuh). The scale and the flag stay on the device
// (GradScaler never waits for them during training).
#include <cuda_runtime.h>

#include "nabla/amp/cuda/unscale.h"
#include "nabla/core/error.h"
#include "nabla/ops/cuda/elementwise/tensor_table.cuh"

namespace nabla::amp::cuda {

namespace {

using ops::cuda::EntryTable;

constexpr int kMaxTensors = 200;
constexpr ops::cuda::TableLaunch kLaunch{};

struct Entry {
  float* data;
  int64_t numel;
};
using Table = EntryTable<Entry, kMaxTensors>;

__global__ void unscale_kernel(Table table, const float* inv_scale_ptr, float* found_inf) {
  const Entry e = table.entries[blockIdx.y];
  const float inv_scale = *inv_scale_ptr;
  bool bad = false;
  ops::cuda::for_grid_stride(e.numel, [&](int64_t i) {
    const float v = e.data[i] * inv_scale;
    e.data[i] = v;
    bad |= !isfinite(v);
  });
  // Every writer stores the same value, so the race is benign; at most one store per thread.
  if (bad) *found_inf = 1.0f;
}

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
  const ops::cuda::LaunchScope scope(found_inf.device().index);
  const auto* inv = static_cast<const float*>(inv_scale.data_ptr());
  auto* flag = static_cast<float*>(found_inf.data_ptr());
  ops::cuda::launch_tables<kMaxTensors, Entry>(
      grads.size(), kLaunch,
      [&](size_t i, Entry& e) {
        // The data pointer of a dense tensor is its lowest element whatever the memory order.
        e = {static_cast<float*>(grads[i].data_ptr()), grads[i].numel()};
        grads[i].bump_version();
        return e.numel;
      },
      [&](const Table& table, dim3 grid) {
        unscale_kernel<<<grid, kLaunch.block, 0, scope.stream()>>>(table, inv, flag);
      });
}

}  // namespace nabla::amp::cuda
