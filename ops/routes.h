// Public header. Routes: the one place nabla is told which implementation to prefer where several
// compute the same op (PyTorch's torch.backends.cudnn.* and torch.backends.cuda.matmul flags).
//
//   {
//     nabla::RoutesGuard g({.cudnn_benchmark = true});   // every other field at its default
//     train();                                            // convolutions time cuDNN's algorithms
//   }                                                     // the routes before the guard are back
//
//   nabla::Routes r = nabla::routes();                    // change one field, keep the others
//   r.matmul_tf32 = true;
//   nabla::RoutesGuard g(r);
//
// One Routes value is in force per process (one GPU per process is how nabla trains on several;
// Note [Routes] in routes.cpp). An op reads it once, when it runs forward, and its backward uses
// that same snapshot, so a guard around a forward pass decides the routes of its backward too.
// Guards nest and restore in reverse order; set them from one thread at a time (as PyTorch's flags),
// not from threads that run ops concurrently with different wishes.
//
// Routes hold only choices a user has a reason to make: speed against reproducibility, precision
// against speed, and fusions the step can be compared without. An implementation measured slower
// than the default has no field: it is not in the library.
#pragma once

namespace nabla {

struct Routes {
  // Convolutions time every cuDNN algorithm once per shape and keep the fastest (the first call
  // of each shape is slow). Off: cuDNN's heuristics pick without running anything.
  bool cudnn_benchmark = false;
  // Only algorithms whose results are bit-identical run to run. Convolutions then take cuDNN's
  // legacy calls with deterministic algorithms, and conv + batch-norm fusion composes.
  bool cudnn_deterministic = false;
  // float32 convolutions may use TensorFloat-32 tensor cores (on by default, as in PyTorch).
  bool conv_tf32 = true;
  // float32 matmul, mm, bmm and linear may use TensorFloat-32 (off by default, as in PyTorch).
  bool matmul_tf32 = false;
  // channels_last float16 training folds the batch norms between convolutions into them
  // (ops/conv_bn.h). Off: the same calls compose conv2d, batch_norm and relu.
  bool conv_batch_norm_fusion = true;

  bool operator==(const Routes&) const = default;
};

// The routes in force now.
Routes routes();

// Puts `routes` in force until the guard is destroyed, then restores what was in force before.
class RoutesGuard {
 public:
  explicit RoutesGuard(const Routes& routes);
  ~RoutesGuard();
  RoutesGuard(const RoutesGuard&) = delete;
  RoutesGuard& operator=(const RoutesGuard&) = delete;

 private:
  Routes previous_;
};

}  // namespace nabla
