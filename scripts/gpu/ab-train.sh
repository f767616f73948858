#!/usr/bin/env bash
# On the GPU machine: the train table (ResNet-50, batch 256: float32 NCHW, AMP fp16 and bf16
# channels_last) for two builds of nabla-bench, alternated A B A B so that drift in the GPU's
# state hits both alike, then a table of each row's best img/s and the ratio B / A.
# Usage: scripts/gpu/ab-train.sh OLD_BENCH NEW_BENCH [ROUNDS]
set -uo pipefail
old=$1
new=$2
rounds=${3:-2}
out=${OUT:-/tmp/nabla-gpu}
mkdir -p "$out/ab"
for round in $(seq 1 "$rounds"); do
  for side in old new; do
    bench=$old
    [[ $side == new ]] && bench=$new
    for cfg in "off:nchw" "fp16:channels-last" "bf16:channels-last"; do
      amp=${cfg%%:*}
      layout=${cfg#*:}
      "$bench" train --arch resnet50 --batch-size 256 --amp "$amp" --layout "$layout" \
        --json "$out/ab/${side}_${amp}_${round}.json" >> "$out/ab/train.log" 2>&1 || echo "failed: $side $amp round $round"
    done
  done
done
python3 - "$out/ab" "$rounds" <<'PY'
import json, sys, pathlib
folder, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def rate(side, amp, r):
    p = folder / f"{side}_{amp}_{r}.json"
    if not p.exists():
        return None
    rows = json.loads(p.read_text())
    return (rows[0] if isinstance(rows, list) else rows)["img_s"]
print(f"{'row':<22}{'old img/s (runs)':>28}{'new img/s (runs)':>28}{'new/old (best)':>16}")
for amp, name in [("off", "fp32 NCHW"), ("fp16", "fp16 channels_last"), ("bf16", "bf16 channels_last")]:
    o = [rate("old", amp, r) for r in range(1, rounds + 1)]
    n = [rate("new", amp, r) for r in range(1, rounds + 1)]
    fo = ", ".join(f"{v:.0f}" if v else "-" for v in o)
    fn = ", ".join(f"{v:.0f}" if v else "-" for v in n)
    bo, bn = max([v for v in o if v] or [0]), max([v for v in n if v] or [0])
    ratio = bn / bo if bo else float("nan")
    print(f"{name:<22}{fo:>28}{fn:>28}{ratio:>16.3f}")
PY
