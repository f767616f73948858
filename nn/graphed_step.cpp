// GraphedStep: eager warm-up watched for host waits, capture on static inputs, replay, and the
// eager fallback with its reason (graphed_step.h).
#include "nabla/nn/graphed_step.h"

#include <exception>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"

namespace nabla::nn {

namespace {

// Why these inputs cannot be captured at all ("" when they can).
std::string not_capturable(const TensorList& inputs) {
  if (!kHasCuda) return "this build of nabla has no CUDA";
  if (inputs.empty()) return "the step takes no input tensors, so nothing tells its device";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) return fmt::format("input {} is undefined", i);
    if (!t.is_cuda()) return fmt::format("input {} is on {}, not a CUDA device", i, t.device().str());
    if (t.device() != inputs[0].device())
      return fmt::format("inputs 0 and {} are on different devices ({}, {})", i, inputs[0].device().str(),
                         t.device().str());
  }
  return "";
}

}  // namespace

GraphedStep::GraphedStep(StepFunction step, GraphedStepOptions options)
    : step_(std::move(step)), options_(options) {
  NABLA_CHECK(static_cast<bool>(step_), "make_graphed_step: the step function is empty");
  NABLA_CHECK(options_.warmup >= 1,
              "make_graphed_step: warmup must be at least 1 (the eager step that settles lazy state before "
              "the capture), got {}",
              options_.warmup);
  if (!options_.enabled) permanent_reason_ = "CUDA graphs are off for this step";
}

GraphedStep::~GraphedStep() = default;
GraphedStep::GraphedStep(GraphedStep&&) noexcept = default;
GraphedStep& GraphedStep::operator=(GraphedStep&&) noexcept = default;

bool GraphedStep::fuses() const {
  return fusion_environment().value_or(options_.fuse);
}

bool GraphedStep::graphed() const {
  return graph_ != nullptr && graph_->captured();
}

Tensor GraphedStep::eager(const TensorList& inputs) {
  ++eager_calls_;
  // The first warm-up calls settle autotuning and lazy state unfused; from the last one on, an
  // eager call (a step that cannot be graphed, a mismatched batch) still gets the step compiler.
  if (calls_ < options_.warmup) return step_(inputs);
  FusionScope fuse(fuses());
  Tensor out = step_(inputs);
  fuse.flush();
  eager_fusion_ = fuse.stats();
  return out;
}

Tensor GraphedStep::operator()(const TensorList& inputs) {
  ++calls_;
  if (!permanent_reason_.empty()) {
    eager_reason_ = permanent_reason_;
    return eager(inputs);
  }
  if (graphed()) {
    if (auto why = mismatch(inputs); !why.empty()) {
      eager_reason_ = why;
      if (!warned_mismatch_) {
        NABLA_LOG_WARN("CUDA graph step: {}; such calls run eagerly", why);
        warned_mismatch_ = true;
      }
      return eager(inputs);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].data_ptr() != static_inputs_[i].data_ptr()) static_inputs_[i].copy_(inputs[i]);
    }
    graph_->replay(cuda::current_stream(static_inputs_[0].device().index));
    ++replays_;
    eager_reason_.clear();
    return output_;
  }
  if (auto why = not_capturable(inputs); !why.empty()) {
    permanent_reason_ = eager_reason_ = why;
    return eager(inputs);
  }
  if (calls_ < options_.warmup) return eager(inputs);  // first-call work (autotuning) may wait
  if (calls_ == options_.warmup) {
    // The last warm-up call is the steady step: it must not wait, or the graph could not hold it.
    cuda::HostWaitCounter waits;
    Tensor out = eager(inputs);
    warmup_fusion_ = eager_fusion_;
    if (waits.count() > 0) {
      permanent_reason_ = eager_reason_ = fmt::format(
          "the step makes the host wait for the GPU ({} time(s) in the last eager warm-up call; first: {}), "
          "which "
          "a CUDA graph cannot hold: every call runs eagerly. Move reads of device values (item(), cpu()) "
          "out of the step",
          waits.count(), waits.first());
      NABLA_LOG_WARN("CUDA graph step: {}", permanent_reason_);
    }
    return out;
  }
  return capture(inputs);
}

Tensor GraphedStep::capture(const TensorList& inputs) {
  // Static buffers in the eager pool (they outlive the graph's pool), in the inputs' layouts.
  static_inputs_.clear();
  for (const Tensor& t : inputs)
    static_inputs_.push_back(options_.adopt_inputs ? t.detach() : t.detach().clone());
  const cuda::Stream stream = cuda::current_stream(inputs[0].device().index);
  graph_ = std::make_unique<cuda::Graph>();
  try {
    graph_->capture_begin(stream);
    Tensor out;
    {
      FusionScope fuse(fuses());
      out = step_(static_inputs_);
      fuse.flush();
      capture_fusion_ = fuse.stats();
    }
    graph_->capture_end();
    NABLA_CHECK(out.defined(), "make_graphed_step: the step returned an undefined tensor");
    output_ = out.detach();
  } catch (const std::exception& e) {
    graph_.reset();  // aborts the capture and gives its pool back
    static_inputs_.clear();
    throw Error(
        fmt::format("make_graphed_step: capturing the step into a CUDA graph failed: {}. Nothing of the "
                    "captured call ran, "
                    "but host-side state it touched (gradients set to undefined memory, say) is not to be "
                    "trusted: zero the "
                    "gradients, or run the step with CUDA graphs off",
                    e.what()));
  }
  if (options_.release_eager_cache) cuda::empty_cache();
  // The capture recorded the step without running it: this call's result comes from the first replay.
  graph_->replay(stream);
  ++replays_;
  eager_reason_.clear();
  return output_;
}

std::string GraphedStep::mismatch(const TensorList& inputs) const {
  if (inputs.size() != static_inputs_.size())
    return fmt::format("the step was captured with {} inputs and is called with {}", static_inputs_.size(),
                       inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& got = inputs[i];
    const Tensor& want = static_inputs_[i];
    // Any layout copies into the static buffer; shape, dtype and device must match.
    if (!got.defined() || got.device() != want.device() || got.dtype() != want.dtype() ||
        got.sizes() != want.sizes()) {
      return fmt::format(
          "input {} is {}, but the step was captured for {} (a last partial batch? use drop_last)", i,
          got.defined() ? describe(got) : std::string("undefined"), describe(want));
    }
  }
  return "";
}

}  // namespace nabla::nn
