// The body shared by the libFuzzer target (checkpoint_fuzz.cpp) and the corpus test that runs in
// CI (tests/optim/checkpoint_fuzz_test.cpp): bytes as a training checkpoint, one safetensors file
// whose entries are prefixed by the part they restore, as nabla-train writes them (model.,
// optimizer., scheduler., scaler., ema.; here also sgd. for a second optimizer kind). Every part
// loads what the file holds, then trains one step from it and saves again, so a malformed
// optimizer or scheduler entry must be refused while loading, not crash the step after. A
// nabla::Error is the only acceptable failure; anything else is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "nabla/amp/grad_scaler.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/core/io/safetensors.h"
#include "nabla/nn/containers.h"
#include "nabla/nn/layers.h"
#include "nabla/ops/factory.h"
#include "nabla/optim/adam.h"
#include "nabla/optim/ema.h"
#include "nabla/optim/scheduler.h"
#include "nabla/optim/sgd.h"

namespace nabla::fuzz {

// What a checkpoint restores: a small model with parameters and buffers, two optimizers, a
// warmed-up cosine schedule, a loss scaler and an EMA. Built fresh for every input.
struct TrainingParts {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::AdamW> adamw;
  std::unique_ptr<optim::SGD> sgd;
  std::unique_ptr<optim::LRScheduler> scheduler;
  amp::GradScaler scaler;
  std::unique_ptr<optim::ExponentialMovingAverage> ema;

  TrainingParts() {
    model->emplace_back<nn::Linear>(nn::LinearOptions{.in = 4, .out = 3});
    model->emplace_back<nn::BatchNorm2d>(3);
    {
      // Fixed weights, so every TrainingParts starts equal and the seed file is reproducible.
      NoGradGuard no_grad;
      for (auto& p : model->parameters()) {
        p.copy_(linspace(-1.0, 1.0, p.numel(), {.dtype = p.dtype()}).reshape(p.sizes()));
      }
    }
    adamw = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.amsgrad = true});
    sgd = std::make_unique<optim::SGD>(model->parameters(),
                                       optim::SgdOptions{.momentum = 0.9, .nesterov = true});
    scheduler = std::make_unique<optim::LinearWarmup>(
        std::make_unique<optim::CosineLR>(*adamw, optim::CosineLROptions{.total_steps = 100}),
        optim::LinearWarmupOptions{.warmup_steps = 5});
    ema = std::make_unique<optim::ExponentialMovingAverage>(model->parameters());
  }

  // One training step from the current state: gradients of ones, both optimizers, the schedule.
  void step() {
    for (auto& p : model->parameters()) p.set_grad(ones_like(p));
    adamw->step();
    sgd->step();
    scheduler->step();
    ema->update();
  }

  std::map<std::string, Tensor> state() const {
    std::map<std::string, Tensor> out;
    auto put = [&](const std::string& prefix, const std::map<std::string, Tensor>& part) {
      for (const auto& [key, value] : part) out[prefix + key] = value;
    };
    put("model.", model->state_dict());
    put("optimizer.", adamw->state_dict());
    put("sgd.", sgd->state_dict());
    put("scheduler.", scheduler->state_dict());
    put("scaler.", scaler.state_dict());
    put("ema.", ema->state_dict());
    return out;
  }

  void load(const std::map<std::string, Tensor>& file) {
    auto take = [&](const std::string& prefix) {
      std::map<std::string, Tensor> part;
      for (const auto& [key, value] : file) {
        if (key.rfind(prefix, 0) == 0) part[key.substr(prefix.size())] = value;
      }
      return part;
    };
    model->load_state_dict(take("model."), /*strict=*/true);
    adamw->load_state_dict(take("optimizer."));
    sgd->load_state_dict(take("sgd."));
    scheduler->load_state_dict(take("scheduler."));
    scaler.load_state_dict(take("scaler."));
    ema->load_state_dict(take("ema."));
  }
};

// A valid checkpoint after two steps: the seed the mutations start from.
inline std::string checkpoint_fuzz_seed() {
  TrainingParts parts;
  parts.step();
  parts.step();
  return serialize_safetensors(parts.state(), {{"nabla.train.arch", "fuzz"}});
}

// Returns true when the bytes loaded as a checkpoint and trained a step.
inline bool checkpoint_fuzz_one(const uint8_t* data, size_t size) {
  try {
    auto file = parse_safetensors(std::as_bytes(std::span(data, size)), "<fuzz input>");
    TrainingParts parts;
    parts.load(file.tensors);
    parts.step();
    (void)serialize_safetensors(parts.state(), {});
    return true;
  } catch (const nabla::Error&) {
    return false;
  }
}

}  // namespace nabla::fuzz
