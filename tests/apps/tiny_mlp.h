// A two-layer MLP without BatchNorm (so micro-batching does not change its gradient), random
// float32 data for it, and the extra CPU memory one of its training steps needs: the pieces the
// OOM-split and batch-size-finder tests train with under set_cpu_memory_limit.
#pragma once

#include <memory>

#include "nabla/core/cpu_memory.h"
#include "test_util.h"

namespace nabla::testing {

inline constexpr int64_t kMlpIn = 32, kMlpHidden = 512, kMlpOut = 10;

struct TinyMlp : nn::Module {
  nn::Linear fc1, fc2;
  TinyMlp() : fc1({.in = kMlpIn, .out = kMlpHidden}), fc2({.in = kMlpHidden, .out = kMlpOut}) {
    register_modules({{"fc1", fc1}, {"fc2", fc2}});
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }  // (B, 32) -> (B, 10)
  size_t parameter_bytes() const {
    size_t bytes = 0;
    for (const auto& p : parameters()) bytes += p.nbytes();
    return bytes;
  }
};

// Built from `seed`: two models made from one seed start with identical weights.
inline std::unique_ptr<TinyMlp> make_tiny_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_unique<TinyMlp>();
}

struct MlpBatch {
  Tensor input;   // (B, 32)
  Tensor target;  // (B, 10)
};

inline MlpBatch random_mlp_batch(int64_t batch, uint64_t seed) {
  return {random_input({batch, kMlpIn}, seed, kFloat32), random_input({batch, kMlpOut}, seed + 1, kFloat32)};
}

// The loss of a batch (mean squared error), times `weight`, backpropagated; returns it detached.
inline Tensor mlp_forward_backward(TinyMlp& model, const Tensor& input, const Tensor& target,
                                   double weight = 1.0) {
  Tensor loss = mse_loss(model.forward(input), target) * weight;
  loss.backward();
  return loss.detach();
}

// How many bytes above what is allocated before it one forward+backward of `batch` samples
// needs at its peak (gradients included), measured on a throwaway model.
inline size_t mlp_step_extra_bytes(int64_t batch) {
  auto model = make_tiny_mlp(1);
  MlpBatch data = random_mlp_batch(batch, 2);
  const size_t before = cpu_memory_allocated();
  cpu_reset_peak_memory_stats();
  mlp_forward_backward(*model, data.input, data.target);
  return cpu_max_memory_allocated() - before;
}

}  // namespace nabla::testing
