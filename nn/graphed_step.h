// Public header. A whole training step as one CUDA graph: captured once, replayed every step.
//
//   auto step = nb::nn::make_graphed_step([&](const nb::Tensor& x, const nb::Tensor& y) {
//     nb::amp::Autocast autocast(device, nb::kFloat16);
//     auto loss = nb::cross_entropy(model->forward(x), y);
//     scaler.scale(loss).backward();
//     scaler.step(opt);            // decided on the device: no host branch
//     scaler.update();
//     opt.zero_grad();
//     return loss;
//   });
//   for (...) {
//     scheduler.step();            // host values reach the graph (Note [Per-step values in a CUDA graph])
//     auto loss = step(batch.input, batch.target);   // copies into static inputs, replays
//   }
//
// The first `warmup` calls run the step eagerly: cuDNN autotuning, lazily created optimizer
// state and the allocator's cache all settle there, and a HostWaitCounter checks that the last
// of them, the steady step, never makes the host wait for the GPU (item(), a copy to the CPU, an
// optimizer the GradScaler cannot skip on the device...), which a graph cannot hold. The next call captures
// the step on the current stream into a graph with a private memory pool (core/cuda/graph.h), on static
// copies of its inputs, and replays it; every later call copies its inputs into those buffers and
// replays. Per-step host values reach the graph through replay hooks: optimizers write their
// learning rates and count their steps, the random ops draw new Philox offsets, so a replayed
// step computes what the eager step would have.
//
// Where a graph cannot apply, the step runs eagerly and eager_reason() says why: a build or
// inputs without CUDA, a step that waits for the host (then every call stays eager, and a warning
// names the wait), or a call whose inputs differ in shape, dtype or device from the captured
// ones (that call alone: a last partial batch, say; drop_last avoids it). Any layout is copied
// into the static buffers. A capture that fails
// for another reason throws, naming the cause.
//
// The returned tensor of a replayed call is the graph's own output buffer, rewritten by the next
// replay: read it (or clone it) before the next call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "nabla/core/tensor.h"
#include "nabla/ops/fusion.h"

namespace nabla::cuda {
class Graph;
}

namespace nabla::nn {

struct GraphedStepOptions {
  int warmup = 3;       // eager calls before the capture (at least 1)
  bool enabled = true;  // false: every call is eager (a --cuda-graph flag left off)
  // After the capture, give the cache's unused eager blocks back to the device: the graph's
  // pool holds the step's memory now, and the eager working set would otherwise stay reserved
  // beside it. Synchronizes once.
  bool release_eager_cache = true;
  // The tensors given to the capturing call become the static input buffers themselves (no copy,
  // no second batch in memory), for a caller that owns them and refills them in place, as a
  // reused synthetic batch or PyTorch's static_input.copy_(batch) idiom. Leave it off for batches
  // from a loader, whose buffers are recycled.
  bool adopt_inputs = false;
  // The step compiler (ops/fusion.h): the last warm-up call, the capture, and every call that
  // runs eagerly after them (a step that waits for the host, a mismatched batch) record the
  // step's pointwise CUDA ops and run each chain as one generated kernel, writing only the values
  // something reads later. The warm-up call compiles (or loads from the disk cache) every kernel,
  // so the capture loads none. Results are bitwise those of the unfused step. NABLA_FUSION=1 or =0
  // in the environment overrides this.
  bool fuse = true;
};

// The step: inputs in, one tensor out (the loss, say).
using StepFunction = std::function<Tensor(const TensorList& inputs)>;

class GraphedStep {
 public:
  explicit GraphedStep(StepFunction step, GraphedStepOptions options = {});
  ~GraphedStep();
  GraphedStep(GraphedStep&&) noexcept;
  GraphedStep& operator=(GraphedStep&&) noexcept;

  Tensor operator()(const TensorList& inputs);
  template <class... T>
  requires(sizeof...(T) > 0 && (std::is_convertible_v<const T&, const Tensor&> && ...)) Tensor operator()(
      const T&... inputs) {
    return (*this)(TensorList{inputs...});
  }

  // Whether the step is captured (later calls with matching inputs replay it).
  bool graphed() const;
  // Why the last call ran eagerly after the warm-up ("" when it replayed).
  const std::string& eager_reason() const { return eager_reason_; }
  int64_t replays() const { return replays_; }
  // What the step compiler did in the last warm-up call (which compiles), in the capture, and in
  // the last call that ran eagerly after the warm-up (a step that cannot be graphed is still fused).
  const FusionStats& warmup_fusion() const { return warmup_fusion_; }
  const FusionStats& eager_fusion() const { return eager_fusion_; }
  const FusionStats& capture_fusion() const { return capture_fusion_; }
  int64_t eager_calls() const { return eager_calls_; }
  // The buffers the graph reads its inputs from (empty before the capture). Writing a batch
  // straight into them saves the copy; a call given these very tensors copies nothing.
  const TensorList& static_inputs() const { return static_inputs_; }

 private:
  Tensor eager(const TensorList& inputs);
  bool fuses() const;  // options_.fuse unless NABLA_FUSION says otherwise
  Tensor capture(const TensorList& inputs);
  // Why `inputs` cannot replay the captured graph ("" when they can).
  std::string mismatch(const TensorList& inputs) const;

  StepFunction step_;
  GraphedStepOptions options_;
  std::unique_ptr<cuda::Graph> graph_;
  TensorList static_inputs_;
  Tensor output_;
  int64_t calls_ = 0;
  int64_t replays_ = 0;
  int64_t eager_calls_ = 0;
  std::string permanent_reason_;  // set: every call is eager
  std::string eager_reason_;
  bool warned_mismatch_ = false;
  FusionStats warmup_fusion_;
  FusionStats eager_fusion_;
  FusionStats capture_fusion_;
};

// A GraphedStep from a callable taking a TensorList or one to four tensors.
template <class F>
GraphedStep make_graphed_step(F step, GraphedStepOptions options = {}) {
  if constexpr (std::is_invocable_r_v<Tensor, F&, const TensorList&>) {
    return GraphedStep(std::move(step), options);
  } else {
    return GraphedStep(
        [step = std::move(step)](const TensorList& in) mutable -> Tensor {
          if constexpr (std::is_invocable_r_v<Tensor, F&, const Tensor&>) {
            return step(in.at(0));
          } else if constexpr (std::is_invocable_r_v<Tensor, F&, const Tensor&, const Tensor&>) {
            return step(in.at(0), in.at(1));
          } else if constexpr (std::is_invocable_r_v<Tensor, F&, const Tensor&, const Tensor&,
                                                     const Tensor&>) {
            return step(in.at(0), in.at(1), in.at(2));
          } else {
            static_assert(
                std::is_invocable_r_v<Tensor, F&, const Tensor&, const Tensor&, const Tensor&, const Tensor&>,
                "make_graphed_step: the step must take a TensorList or one to four tensors and return a "
                "Tensor");
            return step(in.at(0), in.at(1), in.at(2), in.at(3));
          }
        },
        options);
  }
}

}  // namespace nabla::nn
