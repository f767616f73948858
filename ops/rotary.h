// Public header. Rotary position embeddings (RoFormer; LLaMA, Mistral, Qwen, GPT-NeoX).
//
//   nabla::RotaryCache rope(head_dim, max_positions, {.base = 500000, .device = Device::cuda(0)});
//   auto [q_rot, k_rot] = rope(q, k);          // (B, H, T, D) and (B, Hkv, T, D), positions 0..T-1
//   auto k_next = rope(k_new, /*offset=*/T);   // decoding: the new rows are positions T..
//   auto k_at = rope.at(k_new, positions);     // positions held on the device (int64, one per row)
//
// Each pair of features (a, b) of the row at position t is rotated by the angle t * f_i, where
// f_i = base^(-2i / D) for the pair's index i (optionally rescaled, below):
//   (a, b) -> (a cos - b sin, b cos + a sin).
// Pairs are (i, i + D/2), the halves of Hugging Face's LLaMA and GPT-NeoX, or (2i, 2i + 1) when
// interleaved, as GPT-J and Meta's original LLaMA code. x is (..., T, D), D even, any strides; the
// row at index j along T is at position offset + j. The result has x's dtype; the rotation is
// computed in float32 (float64 for float64 x) from the cos/sin tables, which are computed once
// in float64 and rounded. One kernel reads x once and writes the result once, each way; the
// backward is the rotation by minus the angles and saves nothing but the tables. Differentiable.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "nabla/core/tensor.h"

namespace nabla {

// Llama 3's frequency rescaling (Hugging Face's rope_scaling with "rope_type": "llama3"): with
// L = original_max_positions and wavelength w_i = 2 pi / f_i, a pair whose w_i < L /
// high_freq_factor keeps f_i, one whose w_i > L / low_freq_factor gets f_i / factor, and those
// between blend the two: (1 - s) f_i / factor + s f_i with s = (L / w_i - low) / (high - low).
struct RotaryScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_positions = 8192;
};

// The frequencies f_0 .. f_{D/2 - 1} of a head size D, rescaled when `scaling` is given. Bad
// values (D odd or < 2, base <= 0, a scaling with factor <= 0 or high_freq_factor <=
// low_freq_factor) get an error that names them.
std::vector<double> rotary_frequencies(int64_t head_dim, double base,
                                       const std::optional<RotaryScaling>& scaling = {});

struct RotaryCacheOptions {
  double base = 10000.0;
  bool interleaved = false;  // pairs (2i, 2i + 1); default: the halves (i, i + D/2)
  std::optional<RotaryScaling> scaling = {};
  Device device = Device::cpu();
};

// The cos and sin tables of positions 0 .. max_positions - 1, built once on one device, and the
// rotation that reads them: what a model keeps and applies to q and k in every layer and step.
class RotaryCache {
 public:
  RotaryCache() = default;
  RotaryCache(int64_t head_dim, int64_t max_positions, const RotaryCacheOptions& options = {});

  // x rotated as the rows at positions offset .. offset + T - 1 (offset + T <= max_positions).
  Tensor operator()(const Tensor& x, int64_t offset = 0) const;
  // q and k rotated alike, in one call (grouped-query k may have fewer heads).
  std::pair<Tensor, Tensor> operator()(const Tensor& q, const Tensor& k, int64_t offset = 0) const;
  // The rows of x (..., T, D) at the positions in `positions`, a 1-d int64 tensor of T values
  // on x's device, each in [0, max_positions) (checked on the device, as index_select does):
  // nothing is read on the host, so a decoding step whose position lives in device memory can
  // be captured in a CUDA graph and replayed at the next position.
  Tensor at(const Tensor& x, const Tensor& positions) const;
  std::pair<Tensor, Tensor> at(const Tensor& q, const Tensor& k, const Tensor& positions) const;

  bool defined() const { return cos_.defined(); }
  int64_t head_dim() const { return head_dim_; }
  int64_t max_positions() const { return cos_.defined() ? cos_.size(0) : 0; }
  const RotaryCacheOptions& options() const { return options_; }
  // (max_positions, head_dim / 2), float32 (the tables 16-bit and float32 inputs use).
  const Tensor& cos() const { return cos_; }
  const Tensor& sin() const { return sin_; }

 private:
  // float64 tables, made at the first float64 input (shared by copies of the cache).
  struct WideTables {
    std::once_flag once;
    Tensor cos, sin;
  };
  // The tables x's dtype reads (float64 ones made at the first float64 input).
  std::pair<const Tensor&, const Tensor&> tables_for(const Tensor& x) const;
  void check(const Tensor& x) const;
  // The table rows (cos, sin) at `positions`, checked against x.
  std::pair<Tensor, Tensor> rows_at(const Tensor& x, const Tensor& positions) const;
  int64_t head_dim_ = 0;
  RotaryCacheOptions options_;
  std::vector<double> frequencies_;
  Tensor cos_, sin_;  // float32
  std::shared_ptr<WideTables> wide_;
};

// One-off rotation of x with tables for its own positions, computed on x's device each call
// (RotaryCache keeps them instead).
struct RotaryOptions {
  double base = 10000.0;
  int64_t offset = 0;        // the position of x's first row (decoding with a key/value cache)
  bool interleaved = false;  // pairs (2i, 2i + 1); default: the halves (i, i + D/2)
};
Tensor rotary_embedding(const Tensor& x, RotaryOptions options = {});

}  // namespace nabla
