// The epoch loop of nabla-train: steps, progress, metrics, evaluation, checkpoints, stopping.
#include <chrono>
#include <optional>

#include "nabla/amp/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cpu_memory.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/logging.h"
#include "nabla/core/memory_category.h"
#include "nabla/distributed/ddp.h"
#include "nabla/distributed/process_group.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/loss.h"
#include "nabla/ops/reduce.h"
#include "nabla/optim/clip.h"
#include "nabla_train/job.h"
#include "nabla_train/report.h"

namespace nabla::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Under DDP, stopping must happen at the same step on every rank, or the others would wait in an
// allreduce forever. Ranks agree every this many steps (one tiny allreduce and host read).
constexpr int64_t kStopAgreementInterval = 20;

}  // namespace

Tensor Job::forward(const Tensor& input) {
  return ddp ? (*ddp)(input) : model->forward(input);
}

Tensor Job::forward_backward(const Tensor& input, const Tensor& target, double weight) {
  Tensor loss, logits;
  {
    MemoryCategoryScope tag(MemoryCategory::activations);
    amp::Autocast autocast(device, amp_dtype, amp_dtype != kFloat32);
    logits = forward(input);
    loss = cross_entropy(logits, target, {.label_smoothing = recipe.label_smoothing});
  }
  {
    NoGradGuard no_grad;
    const auto n = static_cast<double>(input.size(0));
    loss_sum.add_(loss.detach().to(kFloat32), n);
    correct_sum.add_(sum(eq(argmax(logits.detach(), 1), target)).to(kFloat32));
  }
  MemoryCategoryScope tag(MemoryCategory::gradients);
  Tensor weighted = weight == 1.0 ? loss : loss * weight;
  scaler->scale(weighted).backward();
  return weighted.detach();
}

void Job::optimizer_update() {
  MemoryCategoryScope tag(MemoryCategory::optimizer_state);
  if (options.clip_grad > 0) {
    scaler->unscale_(*optimizer);
    optim::clip_grad_norm_(model->parameters(), options.clip_grad);
  }
  scaler->step(*optimizer);
  scaler->update();
  optimizer->zero_grad();
}

void Job::after_update() {
  scheduler->step();
  if (ema) ema->update();
}

std::string Job::build_graphed_step() {
  if (!device.is_cuda()) return "the run is on the CPU";
  if (splitter) return "--oom-policy split retries steps in micro-batches of other shapes";
  if (options.grad_accum_steps > 1) return "--grad-accum-steps updates every few batches, not every step";
  if (ddp) return "graphs under DistributedDataParallel are not supported yet";
  if (options.optimizer == "lars")
    return "LARS updates with host scalars, which a graph would freeze (use sgd or adamw)";
  graphed_step = std::make_unique<nn::GraphedStep>(nn::make_graphed_step(
      [this](const Tensor& x, const Tensor& y) {
        Tensor loss = forward_backward(x, y, 1.0);
        optimizer_update();
        return loss;
      },
      {.warmup = 3}));
  return "";
}

void Job::train_batch(const TrainBatch& batch, bool update) {
  const double weight = 1.0 / options.grad_accum_steps;  // the mean gradient over the accumulated batches
  if (splitter) {
    // --oom-policy split: a step that runs out of memory is retried in micro-batches; the
    // splitter's reset (job.cpp) puts the gradients and the running sums back as they were.
    loss_at_step_start.copy_(loss_sum);
    correct_at_step_start.copy_(correct_sum);
    splitter->run_step(batch.input, batch.target, [this](const Tensor& x, const Tensor& y, double w) {
      return forward_backward(x, y, w);
    });
    for (const auto& e : splitter->take_new_events()) {
      if (metrics) {
        metrics->write({{"event", "oom_split"},
                        {"step", position.step},
                        {"batch", e.batch_size},
                        {"old_split", e.old_split},
                        {"new_split", e.new_split}});
      }
    }
  } else if (graphed_step && update) {
    (*graphed_step)(batch.input, batch.target);
    after_update();
    return;
  } else if (ddp && !update) {
    auto no_sync = ddp->no_sync();  // only the last batch of an accumulation group allreduces
    forward_backward(batch.input, batch.target, weight);
  } else {
    forward_backward(batch.input, batch.target, weight);
  }
  if (update) {
    optimizer_update();
    after_update();
  }
}

int Job::train() {
  const bool resumed = resume();
  if (options.evaluate_only) {
    const auto result = evaluate();
    if (is_main()) print_eval_only(*this, result);
    return 0;
  }
  const int64_t planned = steps_per_epoch * recipe.epochs;
  const int64_t last_step = options.max_steps > 0 ? std::min(planned, options.max_steps) : planned;
  if (is_main()) print_start(*this, resumed, last_step);
  if (position.step >= last_step) {
    logger().info("nothing to do: the run is at step {} of {}", position.step, last_step);
    return 0;
  }

  if (options.cuda_graph) {
    const std::string why = build_graphed_step();
    if (!why.empty()) logger().warn("--cuda-graph: {}; every step runs eagerly", why);
  }

  RunTotals totals;
  const auto run_start = Clock::now();
  if (device.is_cuda()) cuda::reset_peak_memory_stats(device.index);
  cpu_reset_peak_memory_stats();
  const int64_t batches_per_epoch = steps_per_epoch * options.grad_accum_steps;
  bool stopped = false;

  while (position.epoch < recipe.epochs && position.step < last_step && !stopped) {
    const int64_t epoch = position.epoch;
    train_sampler->skip_in_epoch(epoch, position.batch_in_epoch * recipe.batch_size);
    train_batches->start_epoch(epoch);
    model->train();
    loss_sum.zero_();
    correct_sum.zero_();
    samples_in_epoch = 0;
    EpochClock clock{.start = Clock::now(), .first_step = position.batch_in_epoch / options.grad_accum_steps};
    int accumulated = 0;
    optimizer->zero_grad();

    while (position.batch_in_epoch < batches_per_epoch) {
      auto batch = train_batches->next();
      if (!batch) break;
      const bool update = ++accumulated == options.grad_accum_steps;
      train_batch(*batch, update);
      ++position.batch_in_epoch;
      samples_in_epoch += batch->input.size(0);
      clock.data_wait += batch->wait_seconds;
      if (!update) continue;
      accumulated = 0;
      ++position.step;
      report_progress(*this, clock, false);
      if (train_support::save_due(position.step, options.save_every)) save_checkpoint();
      const bool agree_now = !group || position.step % kStopAgreementInterval == 0;
      if (agree_now && stop_requested(*this)) {
        stopped = true;
        break;
      }
      if (position.step >= last_step) break;
    }
    const bool epoch_done = position.batch_in_epoch >= batches_per_epoch;
    const auto epoch_stats = finish_epoch(*this, clock, totals);
    if (epoch_done) {
      position.epoch += 1;
      position.batch_in_epoch = 0;
    }
    const bool last = position.epoch >= recipe.epochs || position.step >= last_step;
    const bool eval_due = options.eval_every > 0 && epoch_done && position.epoch % options.eval_every == 0;
    std::optional<EvalResult> val;
    if (!stopped && (eval_due || last)) val = evaluate();
    const bool best = val && val->top1 > position.best_top1;
    if (best) position.best_top1 = val->top1;
    if (is_main()) print_epoch(*this, epoch, epoch_stats, val, best);
    if (best) save_checkpoint(/*best=*/true);
    if (stopped || last || (epoch_done && options.save_every == 0)) save_checkpoint();
  }

  totals.seconds = seconds_since(run_start);
  if (graphed_step && is_main()) {
    if (graphed_step->graphed()) {
      logger().info(
          "--cuda-graph: {} steps replayed the captured graph, {} ran eagerly{}", graphed_step->replays(),
          graphed_step->eager_calls(),
          graphed_step->eager_reason().empty() ? "" : " (last: " + graphed_step->eager_reason() + ")");
    } else {
      logger().warn("--cuda-graph: no step was captured: {}",
                    graphed_step->eager_reason().empty()
                        ? std::string("the run ended during the eager warm-up")
                        : graphed_step->eager_reason());
    }
  }
  if (is_main()) {
    if (stopped) {
      print_stopped(*this);
    } else {
      print_summary(*this, totals);
    }
  }
  return 0;
}

}  // namespace nabla::train
