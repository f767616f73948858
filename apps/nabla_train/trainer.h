// The nabla-train run: set up (device, data, model, optimizer, schedule, scaler, EMA, DDP),
// resume, then the epoch loop with evaluation, checkpoints, metrics and progress output.
//
// The loop never synchronizes the device per step: loss and accuracy accumulate in device tensors
// and are read only when progress is printed (at most a few times a second on a terminal, every
// 10 s in a log) and at the end of an epoch.
#pragma once

#include <cstdint>
#include <memory>

#include "nabla_train/options.h"

namespace nabla::train {

// Where the run stands; saved in every checkpoint, so a resumed run continues exactly.
struct RunPosition {
  int64_t epoch = 0;           // 0-based epoch in progress
  int64_t batch_in_epoch = 0;  // batches of this epoch already trained on
  int64_t step = 0;            // optimizer steps since the start of the run
  double best_top1 = -1;       // best validation top-1 so far (-1: none yet)
};

struct EvalResult {
  double top1 = 0;
  double top5 = 0;
  double loss = 0;
  int64_t samples = 0;
};

// Runs the whole job; returns the process exit code (0, including a stop by SIGINT/SIGTERM).
int run_training(const TrainOptions& options);

}  // namespace nabla::train
