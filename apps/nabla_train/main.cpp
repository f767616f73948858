// nabla-train: ResNet and small-CNN training from the command line (docs/training.md).
//
//   nabla-train                                  # the Fashion-MNIST demo (GPU if present)
//   nabla-train --data /data/imagenet --arch resnet50 --amp fp16 --channels-last --resume auto
//
// Errors in flags or inputs end the program with one line, "nabla-train: <what was wrong and what
// is allowed>", and exit status 2 (bad usage) or 1 (a failure while running).
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "nabla/apps/train_support/relaunch.h"
#include "nabla/core/error.h"
#include "nabla/distributed/env.h"
#include "nabla_train/options.h"
#include "nabla_train/trainer.h"

namespace {

int run(int argc, char** argv) {
  nabla::train::TrainOptions options;
  CLI::App app{
      "nabla-train: train a ResNet or a small CNN on Fashion-MNIST, CIFAR-10, an ImageNet-layout folder of "
      "JPEGs or synthetic data.\nWith no arguments: the Fashion-MNIST demo (small CNN on CPU, ResNet-18 on a "
      "GPU). Values shown as 'auto' depend on the data and the device; the run prints what it chose.",
      "nabla-train"};
  app.get_formatter()->column_width(34);
  nabla::train::add_train_flags(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "nabla-train: %s (see nabla-train --help)\n", e.what());
    return 2;
  }
  try {
    if (options.nproc_per_node > 1 && !nabla::distributed::distributed_env().is_distributed()) {
      nabla::train_support::relaunch_under_nabla_run(options.nproc_per_node, argc, argv);
    }
    return nabla::train::run_training(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nabla-train: %s\n", e.what());
    return 1;
  }
}

}  // namespace

// OpenMP threads that spin while waiting halve CPU training when the cores are shared (loader
// threads, other jobs), and gain little otherwise. libgomp reads OMP_WAIT_POLICY once, when it is
// loaded, so the program re-executes itself with the variable set unless the user chose a value.
void prefer_passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on with spinning waits
}

int main(int argc, char** argv) {
  prefer_passive_openmp_waits(argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // from setting up the command line itself
    std::fprintf(stderr, "nabla-train: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "nabla-train: unknown error\n");
  }
  return 1;
}
