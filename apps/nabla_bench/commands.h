// nabla-bench's subcommands. Each lives in its own <name>_command.cpp and registers itself on
// the CLI11 app here; main.cpp only calls the registrations. Add more the same way.
#pragma once

#include <CLI/CLI.hpp>

namespace nabla::bench {

// `nabla-bench data`: decode + RandomResizedCrop + flip throughput and loader stall time.
void add_data_command(CLI::App& app);
// `nabla-bench train`: ResNet training throughput and peak memory, on one GPU or under DDP.
// Takes argc/argv to re-launch itself through nabla-run for --nproc-per-node.
void add_train_command(CLI::App& app, int argc, char** argv);
// `nabla-bench gpt`: GPT-2 training tokens/s and peak memory, beside PyTorch eager and compile.
void add_gpt_command(CLI::App& app);
// `nabla-bench llama`: a LLaMA-style model written plainly (or the zoo's), training tokens/s.
void add_llama_command(CLI::App& app);
// `nabla-bench generate`: nn::models::Llama generation tokens/s, with and without a CUDA graph per token.
void add_generate_command(CLI::App& app);
// `nabla-bench infer`: ResNet eval latency (median, p90) and img/s per batch size and amp.
void add_infer_command(CLI::App& app);
// `nabla-bench concurrent`: N capped inference processes on one GPU; how many finish, img/s.
void add_concurrent_command(CLI::App& app);

}  // namespace nabla::bench
