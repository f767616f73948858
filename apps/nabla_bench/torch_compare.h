// `--compare-pytorch`: runs one of the repo's PyTorch scripts (bench/pytorch/nabla_bench_torch.py
// for train and infer, torch_gpt2.py for gpt) for the same workload, after nabla's own rows and never beside
// them (they would share the GPU), and joins its JSON rows to nabla's so the table can show nabla / PyTorch.
//
// The script is found, in order: at --torch-script; next to this binary (the build copies it
// there, so a bundle of build/<preset>/apps carries it); at bench/pytorch/ under the current
// directory (a run from the repository root).
// When python or torch is missing the comparison is skipped with one line saying why; the
// nabla rows are reported either way.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace nabla::bench {

struct TorchOptions {
  bool enabled = false;
  std::string python = "python3";  // resolved through PATH by the shell
  std::string script;              // empty: search as described above
};

struct TorchComparison {
  std::vector<nlohmann::json> rows;  // the script's result rows
  std::string skipped;               // why there are none ("" when the script ran)
};

inline constexpr const char* kTorchScript = "nabla_bench_torch.py";

// The path of the script named `name` (or of `explicit_path`), or "" with `tried` listing the
// places searched.
std::string find_torch_script(const std::string& explicit_path, std::string& tried,
                              const std::string& name = kTorchScript);

// Single-quotes `word` for /bin/sh.
std::string shell_quote(const std::string& word);

// Runs `python script args...`, echoing each line it prints (prefixed "  torch| "), and collects
// the JSON rows. A row {"skipped": reason} (the script could not import torch), a missing
// interpreter or a failed run give `skipped` instead.
TorchComparison run_torch_script(const TorchOptions& options, const std::vector<std::string>& args,
                                 const std::string& name = kTorchScript);

// For each nabla row, finds the PyTorch row with equal values under `match_keys` and stores, for
// each metric m, "<prefix>_<m>" and "ratio_<m>" (nabla / PyTorch; null where either is
// missing), or with another prefix than "torch", "<prefix>_ratio_<m>" (torch.compile's rows).
void attach_torch_rows(std::vector<nlohmann::json>& nabla_rows, const std::vector<nlohmann::json>& torch_rows,
                       const std::vector<std::string>& match_keys, const std::vector<std::string>& metrics,
                       const std::string& prefix = "torch");

}  // namespace nabla::bench
