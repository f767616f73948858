// nabla-bench's subcommands. Each lives in its own <name>_command.cpp and registers itself on
// the CLI11 app here; main.cpp only calls the registrations. Add `train`, `concurrent`, ... the
// same way.
#pragma once

#include <CLI/CLI.hpp>

namespace nabla::bench {

// `nabla-bench data`: decode + RandomResizedCrop + flip throughput and loader stall time.
void add_data_command(CLI::App& app);
// `nabla-bench train`: ResNet training throughput and peak memory, on one GPU or under DDP.
// Takes argc/argv to re-launch itself through nabla-run for --nproc-per-node.
void add_train_command(CLI::App& app, int argc, char** argv);

}  // namespace nabla::bench
