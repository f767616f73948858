#include "nabla_train/report.h"

#include <cstdio>

#include "nabla/core/cpu_memory.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/logging.h"
#include "nabla/core/memory_category.h"
#include "nabla/distributed/process_group.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"

namespace nabla::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double current_lr(const Job& job) {
  return job.optimizer->param_groups().front().lr.value_or(job.recipe.lr);
}

int64_t gpu_memory(const Job& job) {
  return job.device.is_cuda() ? static_cast<int64_t>(cuda::memory_reserved(job.device.index)) : -1;
}

void add_scalars(Job& job, const std::vector<std::pair<std::string, double>>& scalars) {
  if (job.tensorboard) job.tensorboard->add_scalars(job.position.step, scalars);
}

}  // namespace

void report_progress(Job& job, EpochClock& clock, bool force) {
  if (!job.is_main()) return;
  const auto now = Clock::now();
  const bool terminal = job.progress && job.progress->terminal();
  const double interval = terminal ? 0.5 : 10.0;
  if (!force && clock.last_report != Clock::time_point{} &&
      seconds_between(clock.last_report, now) < interval)
    return;
  if (!force && clock.last_report == Clock::time_point{} && seconds_between(clock.start, now) < interval)
    return;
  clock.last_report = now;
  const double samples = static_cast<double>(std::max<int64_t>(job.samples_in_epoch, 1));
  const double loss = job.loss_sum.item<double>() / samples;  // the host read (a sync) happens here only
  const double top1 = job.correct_sum.item<double>() / samples;
  const double elapsed = seconds_between(clock.start, now);
  const double img_s = static_cast<double>(job.samples_in_epoch * job.world_size) / std::max(elapsed, 1e-9);
  const int64_t step_in_epoch = job.position.batch_in_epoch / job.options.grad_accum_steps;
  if (job.progress) {
    job.progress->update({.epoch = job.position.epoch + 1,
                          .epochs = job.recipe.epochs,
                          .step = step_in_epoch,
                          .steps = job.steps_per_epoch,
                          .loss = loss,
                          .top1 = top1,
                          .lr = current_lr(job),
                          .images_per_second = img_s,
                          .data_wait_fraction = clock.data_wait / std::max(elapsed, 1e-9),
                          .gpu_memory_bytes = gpu_memory(job),
                          .elapsed_seconds = elapsed});
  }
  job.metrics->write({{"event", "train"},
                      {"epoch", job.position.epoch + 1},
                      {"step", job.position.step},
                      {"loss", loss},
                      {"top1", top1},
                      {"lr", current_lr(job)},
                      {"img_s", img_s},
                      {"data_wait", clock.data_wait / std::max(elapsed, 1e-9)}});
  add_scalars(
      job,
      {{"train/loss", loss}, {"train/top1", top1}, {"train/lr", current_lr(job)}, {"perf/img_s", img_s}});
}

EpochStats finish_epoch(Job& job, const EpochClock& clock, RunTotals& totals) {
  EpochStats s;
  s.seconds = seconds_between(clock.start, Clock::now());
  // [loss sum, correct, samples, data wait] over ranks; the one host read of the epoch.
  Tensor t =
      stack({job.loss_sum.to(kFloat64), job.correct_sum.to(kFloat64),
             full({}, static_cast<double>(job.samples_in_epoch), {.dtype = kFloat64, .device = job.device}),
             full({}, clock.data_wait, {.dtype = kFloat64, .device = job.device})});
  if (job.group) job.group->allreduce(t, distributed::ReduceOp::sum)->wait();
  const Tensor host = t.cpu();
  const double* v = host.data_ptr<double>();
  s.samples = static_cast<int64_t>(v[2]);
  const double samples = std::max(v[2], 1.0);
  s.loss = v[0] / samples;
  s.top1 = v[1] / samples;
  s.images_per_second = v[2] / std::max(s.seconds, 1e-9);
  s.data_wait_fraction = v[3] / job.world_size / std::max(s.seconds, 1e-9);
  totals.images += s.samples;
  totals.train_seconds += s.seconds;
  totals.epochs += 1;
  if (job.is_main() && job.progress) {
    job.progress->finish_epoch({.epoch = job.position.epoch + 1,
                                .epochs = job.recipe.epochs,
                                .step = job.position.batch_in_epoch / job.options.grad_accum_steps,
                                .steps = job.steps_per_epoch,
                                .loss = s.loss,
                                .top1 = s.top1,
                                .lr = current_lr(job),
                                .images_per_second = s.images_per_second,
                                .data_wait_fraction = s.data_wait_fraction,
                                .gpu_memory_bytes = gpu_memory(job),
                                .elapsed_seconds = s.seconds});
  }
  return s;
}

bool stop_requested(Job& job) {
  if (!job.group) return job.stop->requested();
  Tensor flag = full({1}, job.stop->requested() ? 1.0 : 0.0, {.dtype = kFloat32, .device = job.device});
  job.group->allreduce(flag, distributed::ReduceOp::max)->wait();
  return flag.item<double>() > 0;
}

void print_start(const Job& job, bool resumed, int64_t last_step) {
  const auto& r = job.recipe;
  logger().info("nabla-train: {} on {} ({} training / {} validation images, {} classes), device {}{}", r.arch,
                r.data_kind, job.data.train->size(), job.data.val->size(), job.data.num_classes,
                r.device.str(), job.world_size > 1 ? fmt::format(" x {} ranks", job.world_size) : "");
  logger().info(
      "recipe: {} epochs x {} steps, batch {}{}, {} lr {:g} ({} schedule, warmup {:g} epochs), "
      "weight decay {:g}, label smoothing {:g}, amp {}{}",
      r.epochs, job.steps_per_epoch, r.batch_size,
      job.options.grad_accum_steps > 1 ? fmt::format(" x {} accumulated", job.options.grad_accum_steps) : "",
      job.options.optimizer, r.lr, r.lr_schedule, r.warmup_epochs, r.weight_decay, r.label_smoothing,
      job.options.amp, job.options.channels_last ? ", channels_last" : "");
  logger().info("{} at step {}; stopping at step {}; checkpoints and metrics in {}",
                resumed ? "resuming" : "starting", job.position.step, last_step, r.checkpoint_dir);
}

void print_epoch(Job& job, int64_t epoch, const EpochStats& s, const std::optional<EvalResult>& val,
                 bool best) {
  std::string val_text;
  if (val) {
    val_text = fmt::format(" | val top-1 {:.2f}% top-5 {:.2f}% loss {:.4f}{}", 100 * val->top1,
                           100 * val->top5, val->loss, best ? " (best)" : "");
  }
  logger().info("epoch {}/{}: train loss {:.4f} top-1 {:.2f}%{} | {:.1f} s, {:.0f} img/s, data wait {:.1f}%",
                epoch + 1, job.recipe.epochs, s.loss, 100 * s.top1, val_text, s.seconds, s.images_per_second,
                100 * s.data_wait_fraction);
  nlohmann::json record = {{"event", "epoch"},
                           {"epoch", epoch + 1},
                           {"step", job.position.step},
                           {"loss", s.loss},
                           {"top1", s.top1},
                           {"seconds", s.seconds},
                           {"img_s", s.images_per_second},
                           {"data_wait", s.data_wait_fraction}};
  std::vector<std::pair<std::string, double>> scalars = {{"epoch/train_loss", s.loss},
                                                         {"epoch/train_top1", s.top1}};
  if (val) {
    record["val_top1"] = val->top1;
    record["val_top5"] = val->top5;
    record["val_loss"] = val->loss;
    scalars.insert(scalars.end(),
                   {{"val/top1", val->top1}, {"val/top5", val->top5}, {"val/loss", val->loss}});
  }
  job.metrics->write(record);
  add_scalars(job, scalars);
}

void print_eval_only(Job& job, const EvalResult& r) {
  std::printf("%s on %lld validation images: top-1 %.2f%%, top-5 %.2f%%, loss %.4f\n",
              job.recipe.arch.c_str(), static_cast<long long>(r.samples), 100 * r.top1, 100 * r.top5, r.loss);
  job.metrics->write(
      {{"event", "evaluate"}, {"top1", r.top1}, {"top5", r.top5}, {"loss", r.loss}, {"samples", r.samples}});
}

void print_stopped(const Job& job) {
  std::printf(
      "stopped by %s at step %lld (epoch %lld); checkpoint saved in %s; continue with --resume auto\n",
      train_support::signal_name(job.stop->signal()), static_cast<long long>(job.position.step),
      static_cast<long long>(job.position.epoch) + 1, job.recipe.checkpoint_dir.c_str());
}

void print_summary(Job& job, const RunTotals& t) {
  const double img_s = static_cast<double>(t.images) / std::max(t.train_seconds, 1e-9);
  std::string memory;
  if (job.device.is_cuda()) {
    memory = fmt::format(
        "peak GPU memory {} allocated, {} reserved",
        train_support::format_bytes(static_cast<int64_t>(cuda::max_memory_allocated(job.device.index))),
        train_support::format_bytes(static_cast<int64_t>(cuda::max_memory_reserved(job.device.index))));
  } else {
    memory = fmt::format("peak CPU tensor memory {}",
                         train_support::format_bytes(static_cast<int64_t>(cpu_max_memory_allocated())));
  }
  std::printf("done: %lld steps in %s; best val top-1 %.2f%%; mean %.0f img/s; %s\n",
              static_cast<long long>(job.position.step), train_support::format_duration(t.seconds).c_str(),
              100 * std::max(job.position.best_top1, 0.0), img_s, memory.c_str());
  std::printf("checkpoints, metrics.jsonl and TensorBoard events are in %s\n",
              job.recipe.checkpoint_dir.c_str());
  job.metrics->write({{"event", "summary"},
                      {"steps", job.position.step},
                      {"seconds", t.seconds},
                      {"best_val_top1", job.position.best_top1},
                      {"img_s", img_s}});
  if (job.options.memory_report) {
    if (job.device.is_cuda()) std::printf("%s\n", cuda::memory_summary(job.device.index).c_str());
    std::printf("%s\n", memory_category_report(job.device).c_str());
  }
}

}  // namespace nabla::train
