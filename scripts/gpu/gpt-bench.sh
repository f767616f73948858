#!/usr/bin/env bash
# On the GPU machine: GPT-2 124M training at batch 16 x 1024 in bfloat16 (examples/gpt/train_gpt
# --bench), then PyTorch eager and torch.compile (bench/pytorch/torch_gpt2.py) in the same call,
# and a table of the ratios. Usage: scripts/gpu/gpt-bench.sh [BUILD] [BATCH] [MODES]
set -uo pipefail
build=${1:-build/cuda}
batch=${2:-16}
modes=${3:-eager,compile}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$build/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$build/examples/train_gpt" --bench --batch "$batch" 2>&1 | tee "$out/gpt_nabla.log"
PYTHONUNBUFFERED=1 python3 "$(dirname "$0")/../../bench/pytorch/torch_gpt2.py" --batch "$batch" --modes "$modes" \
  2>&1 | tee "$out/gpt_torch.log"
python3 - "$out/gpt_nabla.log" "$out/gpt_torch.log" <<'PY'
import ast, sys
rows = []
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("{'mode'"):
            rows.append(ast.literal_eval(line.strip()))
nabla = next((r for r in rows if r["mode"] == "nabla"), None)
print(f"{'mode':10} {'ms/step':>9} {'tokens/s':>10} {'peak GiB':>9} {'nabla x':>8}")
for r in rows:
    ratio = nabla["tokens_s"] / r["tokens_s"] if nabla else float("nan")
    print(f"{r['mode']:10} {r['ms_per_step']:9.2f} {r['tokens_s']:10.0f} {r['peak_alloc_GiB']:9.2f} {ratio:8.3f}")
PY
