#include "nabla_train/trainer.h"

#include <filesystem>
#include <fstream>

#include "nabla/core/cuda/memory.h"
#include "nabla/core/logging.h"
#include "nabla/core/memory_category.h"
#include "nabla_train/job.h"

namespace nabla::train {
namespace {

// Out of memory: the allocator's state at that moment is what explains it, so it is written
// next to the checkpoints (segments and blocks, JSON on a GPU; the category table on the CPU).
void write_oom_snapshot(const Job& job) {
  if (job.recipe.checkpoint_dir.empty()) return;
  try {
    std::filesystem::create_directories(job.recipe.checkpoint_dir);
    const bool gpu = job.device.is_cuda();
    const auto path = std::filesystem::path(job.recipe.checkpoint_dir) /
                      (gpu ? "oom-memory-snapshot.json" : "oom-memory-report.txt");
    std::ofstream(path) << (gpu ? cuda::memory_snapshot(job.device.index)
                                : memory_category_report(job.device));
    logger().error("out of memory; the allocator's state is in {}{}", path.string(),
                   gpu ? " (try --memory-fraction, a smaller --batch-size, or --oom-policy split)" : "");
  } catch (const std::exception& e) {
    logger().error("out of memory; writing the memory snapshot failed too: {}", e.what());
  }
}

}  // namespace

int run_training(const TrainOptions& options) {
  Job job(options);
  try {
    job.setup();
    return job.train();
  } catch (const OutOfMemoryError&) {
    write_oom_snapshot(job);
    throw;
  }
}

}  // namespace nabla::train
