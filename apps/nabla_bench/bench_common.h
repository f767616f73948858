// What nabla-bench's GPU commands (train, infer) share: the model zoo by name, the memory-
// fraction cap and its out-of-memory message, the --compare-pytorch flags, and writing rows.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nabla/core/tensor.h"
#include "nabla/nn/graphed_step.h"
#include "nabla/nn/module.h"
#include "nabla_bench/torch_compare.h"

namespace nabla::bench {

// A torchvision-named ResNet with 1000 classes; checkpoint_segments > 0 turns on gradient
// checkpointing. An unknown name is an error listing the known ones.
std::shared_ptr<nn::Module> make_model(const std::string& arch, int checkpoint_segments = 0);

double gib(size_t bytes);

// The untimed calls before a benchmark's timed steps, and the allocated peak of those that ran
// eagerly. With a CUDA graph, `capture_call` is the call that captures: a replay allocates
// nothing the allocator sees (the graph's pool holds the step's memory from the capture on), so
// the peak restarts there and what follows is the capture's, the steady state, as PyTorch's
// figure after its warm-up. Without one (`capture_call` < 0) it restarts after the last call.
struct WarmUp {
  double seconds = 0;
  size_t eager_peak = 0;  // bytes; 0 on the CPU
};
WarmUp warm_up(int calls, int capture_call, bool cuda, const std::function<void()>& run_step);

// One line on what the step compiler did for a graphed step: the fused kernels and the ops they
// hold, and the compile time (cold: NVRTC; warm: the disk cache), e.g.
// "step compiler: 41 fused kernels for 118 ops (12 ops unfused); compile 2.31 s cold (41 programs)".
void print_fusion_report(const nn::GraphedStep& step);
MemoryFormat memory_format_of(const std::string& layout);  // "nchw" or "channels-last"
DType autocast_dtype_of(const std::string& amp);           // "fp16" or "bf16" (kFloat16 for "off")

// --memory-fraction F: caps this process's reserved device memory at F of the GPU's total
// (cuda::set_memory_fraction) before anything is allocated. 0 leaves it uncapped.
void apply_memory_fraction(double fraction);
// Runs `body`; an out-of-memory error (the allocator's, or a cuDNN/cuBLAS allocation failure)
// comes back as one line that names the configuration and the fraction, e.g. "out of memory in
// resnet50 infer batch 256 amp fp16 nchw under --memory-fraction 0.15 (...)", with the
// allocator's own message (sizes, limit) in the parentheses.
void with_oom_context(const std::string& what, double fraction, const std::function<void()>& body);

// --compare-pytorch, --python, --torch-script on `cmd`.
void add_torch_flags(CLI::App* cmd, TorchOptions& options);
// --memory-fraction on `cmd`.
void add_memory_fraction_flag(CLI::App* cmd, double& fraction);

// Writes `rows` as a JSON list to `path` ("" writes nothing) and says so.
void write_json_rows(const std::string& path, const std::vector<nlohmann::json>& rows);

}  // namespace nabla::bench
