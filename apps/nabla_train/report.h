// What nabla-train tells the user and writes down: progress while an epoch runs, a line per
// epoch, the final summary, and the same numbers in metrics.jsonl and TensorBoard. Only rank 0
// prints and writes; the numbers are reduced over ranks first.
#pragma once

#include <chrono>
#include <optional>

#include "nabla_train/job.h"

namespace nabla::train {

struct EpochClock {
  std::chrono::steady_clock::time_point start;
  int64_t first_step = 0;  // optimizer steps of this epoch done before this process (resume)
  double data_wait = 0;    // seconds the loop waited for batches
  std::chrono::steady_clock::time_point last_report = {};
};

struct EpochStats {
  double loss = 0;  // mean training loss over the epoch's samples (all ranks)
  double top1 = 0;  // training top-1
  int64_t samples = 0;
  double seconds = 0;
  double images_per_second = 0;
  double data_wait_fraction = 0;
};

struct RunTotals {
  double seconds = 0;        // wall time of the training loop, evaluation included
  double train_seconds = 0;  // time inside epochs' step loops
  int64_t images = 0;        // trained images, all ranks
  int64_t epochs = 0;
};

// Prints progress and writes a metrics record when due (time-based; reading the running sums is
// the only host synchronization, a few times a second at most). `force` prints regardless.
void report_progress(Job& job, EpochClock& clock, bool force);
// Ends the epoch's progress output; reduces the epoch's numbers over ranks.
EpochStats finish_epoch(Job& job, const EpochClock& clock, RunTotals& totals);
// SIGINT/SIGTERM seen (by any rank, under DDP).
bool stop_requested(Job& job);

void print_start(const Job& job, bool resumed, int64_t last_step);
void print_epoch(Job& job, int64_t epoch, const EpochStats& stats, const std::optional<EvalResult>& val,
                 bool best);
void print_eval_only(Job& job, const EvalResult& result);
void print_stopped(const Job& job);
void print_summary(Job& job, const RunTotals& totals);

}  // namespace nabla::train
