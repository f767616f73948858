// Helpers of the CUDA batch-norm tests (parity_norm_test.cpp): one batch-norm call through the
// public ops on either device, with its backward, and the tolerances its results meet against the
// CPU.
#pragma once

#include <string>

#include "nabla/ops/cuda/batch_norm/kernels.h"
#include "parity_util.h"

namespace nabla::testing {

// Batch statistics are float sums on CUDA and double sums on the CPU; 16-bit outputs may differ
// by an ulp of rounding; parameter gradients are float32 sums of 16-bit products.
inline Tolerance output_tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return {1e-10, 1e-10};
    case kFloat32:
      return {1e-4, 1e-4};
    case kFloat16:
      return {5e-3, 5e-3};
    default:
      return {3e-2, 3e-2};
  }
}

inline Tolerance param_tolerance(DType dtype) {
  return dtype == kFloat64   ? Tolerance{1e-10, 1e-10}
         : dtype == kFloat32 ? Tolerance{1e-4, 1e-4}
                             : Tolerance{1e-2, 1e-2};
}

inline DType param_dtype(DType dtype) {
  return dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype;
}

// One batch-norm call on the CPU and on CUDA from the same values, with a backward pass. With
// `owned_grad` the gradient reaching the op is a fresh tensor nothing else holds (the backward of
// sum(y * g)), which the fused ops may write their results over; otherwise it is g, which the
// caller still holds.
struct BnRun {
  Tensor y, dx, dw, db, running_mean, running_var, dz;
};

inline BnRun run_batch_norm(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Tensor& rm_in,
                            const Tensor& rv_in, const Tensor& g_in, Device device, BatchNormOptions options,
                            const Tensor& z_in = {}, int fused = 0, bool owned_grad = false) {
  auto on = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  Tensor x = on(x_in).detach().requires_grad_(true);
  Tensor w = w_in.defined() ? on(w_in).detach().requires_grad_(true) : Tensor();
  Tensor b = b_in.defined() ? on(b_in).detach().requires_grad_(true) : Tensor();
  Tensor z = z_in.defined() ? on(z_in).detach().requires_grad_(true) : Tensor();
  Tensor rm = rm_in.defined() ? on(rm_in).clone() : Tensor(),
         rv = rv_in.defined() ? on(rv_in).clone() : Tensor();
  Tensor y = fused == 0   ? batch_norm(x, w, b, rm, rv, options)
             : fused == 1 ? batch_norm_relu(x, w, b, rm, rv, options)
                          : batch_norm_add_relu(x, z, w, b, rm, rv, options);
  if (owned_grad) {
    sum(y * on(g_in)).backward();
  } else {
    y.backward(on(g_in));
  }
  return {y,  x.grad(), w.defined() ? w.grad() : Tensor(), b.defined() ? b.grad() : Tensor(),
          rm, rv,       z.defined() ? z.grad() : Tensor()};
}

inline void expect_runs_match(const BnRun& gpu, const BnRun& cpu, DType dtype, const std::string& what) {
  const Tolerance out = output_tolerance(dtype), par = param_tolerance(dtype);
  EXPECT_TRUE(matches_cpu(gpu.y, cpu.y, out)) << what << " y";
  EXPECT_TRUE(matches_cpu(gpu.dx, cpu.dx, out)) << what << " dx";
  if (cpu.dw.defined()) EXPECT_TRUE(matches_cpu(gpu.dw, cpu.dw, par)) << what << " dweight";
  if (cpu.db.defined()) EXPECT_TRUE(matches_cpu(gpu.db, cpu.db, par)) << what << " dbias";
  if (cpu.running_mean.defined()) {
    EXPECT_TRUE(matches_cpu(gpu.running_mean, cpu.running_mean, par)) << what << " running_mean";
    EXPECT_TRUE(matches_cpu(gpu.running_var, cpu.running_var, par)) << what << " running_var";
  }
}

// relu(bn(x) [+ z]) composed on the CPU in float64 from the same 16-bit inputs, and its
// gradients: the reference that nabla's fused kernels, which round once, should meet. (The
// composed 16-bit ops round bn(x) before the add, which moves the ReLU's mask wherever
// bn(x) + z is within an ulp of zero.)
inline BnRun composed_reference(const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& b,
                                const Tensor& rm, const Tensor& rv, const Tensor& g, BatchNormOptions o,
                                bool add) {
  const BnRun r =
      run_batch_norm(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), rm.to(kFloat64), rv.to(kFloat64),
                     g.to(kFloat64), Device::cpu(), o, add ? z.to(kFloat64) : Tensor(), add ? 2 : 1);
  return {r.y.to(x.dtype()),
          r.dx.to(x.dtype()),
          r.dw.to(kFloat32),
          r.db.to(kFloat32),
          r.running_mean.to(kFloat32),
          r.running_var.to(kFloat32),
          add ? r.dz.to(x.dtype()) : Tensor()};
}

// A fused 16-bit result, rounded once, against composed_reference.
inline void expect_one_rounding_match(const BnRun& gpu, const BnRun& ref, DType dtype,
                                      const std::string& what) {
  const Tolerance out = dtype == kFloat16 ? Tolerance{4e-3, 1e-2} : Tolerance{2e-2, 3e-2};
  const Tolerance par{2e-3, 2e-3};
  EXPECT_TRUE(matches_cpu(gpu.y, ref.y, out)) << what << " y";
  EXPECT_TRUE(matches_cpu(gpu.dx, ref.dx, out)) << what << " dx";
  if (ref.dz.defined()) EXPECT_TRUE(matches_cpu(gpu.dz, ref.dz, out)) << what << " dresidual";
  EXPECT_TRUE(matches_cpu(gpu.dw, ref.dw, par)) << what << " dweight";
  EXPECT_TRUE(matches_cpu(gpu.db, ref.db, par)) << what << " dbias";
  EXPECT_TRUE(matches_cpu(gpu.running_mean, ref.running_mean, par)) << what << " running_mean";
  EXPECT_TRUE(matches_cpu(gpu.running_var, ref.running_var, par)) << what << " running_var";
}

}  // namespace nabla::testing
