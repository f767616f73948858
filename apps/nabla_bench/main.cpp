// nabla-bench: benchmarks as a separate program (never timed unit tests). Subcommands are in
// commands.h.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "nabla_bench/commands.h"

int main(int argc, char** argv) {
  try {
    CLI::App app{"nabla-bench: performance measurements for nabla"};
    app.require_subcommand(1);
    nabla::bench::add_data_command(app);
    nabla::bench::add_train_command(app, argc, argv);
    nabla::bench::add_infer_command(app);
    nabla::bench::add_gpt_command(app);
    nabla::bench::add_llama_command(app);
    nabla::bench::add_generate_command(app);
    nabla::bench::add_concurrent_command(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
  } catch (const std::exception& e) {
    std::cerr << "nabla-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
