#!/usr/bin/env bash
# The performance suite and both embedded configs (all_methods, decoders) at full size on a CUDA GPU, in bf16:
#   bash bench/gpu.sh            (OUT_DIR=runs/gpu-bench by default; PY=.venv/bin/python)
# Prints absolute tokens/s (guided decoding) and pairs/s (RM pair scoring) and each config's wall time.
# Exits 3 with a message on a machine without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT_DIR:-runs/gpu-bench}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "no CUDA device: bench/gpu.sh needs an NVIDIA GPU; run \`make bench\` for the CPU suite" >&2
  exit 3
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$OUT"

"$PY" bench/suite.py --device cuda --dtype bfloat16 --out "$OUT/benchmarks-gpu.md" --figures "$OUT/figures.json"

declare -A WALL
for cfg in all_methods decoders; do
  # full size: the embedded config without its CPU caps (prompt and user limits, shortened LoRA training)
  "$PY" - "$cfg" "$OUT/$cfg-full.yaml" <<'PYEOF'
import sys
from importlib import resources

import yaml

name, dest = sys.argv[1], sys.argv[2]
cfg = yaml.safe_load((resources.files("perbench") / "configs" / f"{name}.yaml").read_text())
if isinstance(cfg.get("benchmark"), dict):
    for key in ("max_train_prompts", "max_test_prompts"):
        cfg["benchmark"].pop(key, None)
for key in ("max_test_prompts", "max_gen_users"):
    cfg.pop(key, None)
cfg["methods"] = [
    {k: v for k, v in m.items() if k != "steps"} if isinstance(m, dict) else m for m in cfg.get("methods", [])
]
with open(dest, "w") as fh:
    yaml.safe_dump(cfg, fh, sort_keys=False)
PYEOF
  start=$(date +%s)
  "$(dirname "$PY")/perbench" run "$OUT/$cfg-full.yaml" --device cuda --dtype bfloat16 --out-dir "$OUT/runs" --run-name "$cfg"
  WALL[$cfg]=$(( $(date +%s) - start ))
done

"$PY" - "$OUT/figures.json" <<'PYEOF'
import json
import sys

figs = json.load(open(sys.argv[1]))
guided = figs.get("guided", {})
print("\nguided decoding, tokens/s (bf16, CUDA):")
for key in ("tokens_per_s_greedy", "tokens_per_s_args_shared", "tokens_per_s_batched_args_b16"):
    if key in guided:
        print(f"  {key.removeprefix('tokens_per_s_')}: {guided[key]:.1f}")
print("RM pair scoring, pairs/s (bf16, CUDA):")
for name, rate in figs.get("rm_scoring", {}).get("pairs_per_s", {}).items():
    print(f"  {name}: {rate:.2f}")
PYEOF
for cfg in all_methods decoders; do
  echo "perbench run $cfg (full size, bf16): ${WALL[$cfg]} s -> $OUT/runs/$cfg"
done
echo "suite report: $OUT/benchmarks-gpu.md"
