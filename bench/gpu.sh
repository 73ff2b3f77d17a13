#!/usr/bin/env bash
# perbench on one CUDA GPU, side by side with the plain libraries under it, within BUDGET_S (default 480 s):
#   bash bench/gpu.sh               the measurements; writes docs/benchmarks-gpu.md (and DEST/benchmarks-gpu.md)
#   bash bench/gpu.sh --cpu-smoke   every step at tiny sizes on a CPU, in a few minutes (a check of the script; its
#                                   steps share one budget, default 3600 s, with no per-step limits: a busy CPU
#                                   is slow, and a smoke test checks that every step finishes, not how fast)
# Steps, in order, each under a timeout that leaves the later ones their time: the environment; the plain-library
# anchors (transformers `generate` at batch 64/256/1,024 and a bf16 forward at batch 16/256, SmolLM2-135M-shaped
# random weights); bench/suite.py's guided and rm_scoring pieces; `perbench run` of the default config from an empty
# cache and its rerun; `perbench run scale` from an empty cache (it leaves the next step 120 s); `perbench run
# decoders` from an empty cache (every decoder, GenARM's LoRA fit included, offline); random-weight Llama-3.2-1B- and
# 3.1-8B-shaped throughput. A step that fails or runs out of time is recorded as such on the page, never estimated.
#   STEPS=environment,decoders,shapes bash bench/gpu.sh   only these steps (a second call for what the first did not
#                                   reach); then merge the two runs' figures into one page:
#   python bench/gpu_bench.py render --figures SECOND/figures.json --merge FIRST/figures.json
# Runs from a wheel install with no network and no .venv (PYTHONPATH installs, ../shared/gpu/bundle.sh): PY defaults
# to .venv/bin/python when there is one, else python3; perbench runs as `$PY -m perbench`. The output folder DEST is
# $OUT when set (a device machine's returned folder), else $OUT_DIR, else runs/gpu-bench. Exits 3 without CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
DEST=${OUT:-${OUT_DIR:-runs/gpu-bench}}
SMOKE=0
[ "${1:-}" = "--cpu-smoke" ] && SMOKE=1
if [ "$SMOKE" = 1 ]; then BUDGET_S=${BUDGET_S:-3600}; else BUDGET_S=${BUDGET_S:-480}; fi
if [ "$SMOKE" = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "no CUDA device: bench/gpu.sh needs an NVIDIA GPU (bash bench/gpu.sh --cpu-smoke checks the script on a CPU)" >&2
  exit 3
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PERBENCH_QUIET=1 PYTHONUNBUFFERED=1
mkdir -p "$DEST"
FIG="$DEST/figures.json"
rm -f "$FIG"
START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

STEPS=",${STEPS:-environment,anchors,suite,default,scale,decoders,shapes},"
want() {  # pool_more (the large edition's extra base responses, when the wheel lacks them) goes with scale
  local name=$1
  [ "$name" = pool_more ] && name=scale
  [[ "$STEPS" == *",$name,"* ]]
}

# step NAME LIMIT_S CMD...: runs CMD under min(LIMIT_S, the time left); a failure or timeout is recorded on the page
step() {
  local name=$1 limit=$2 t rc
  shift 2
  want "$name" || return 0
  t=$(left)
  [ "$SMOKE" = 0 ] && [ "$limit" -lt "$t" ] && t=$limit
  if [ "$t" -le 5 ]; then
    "$PY" bench/gpu_bench.py unfinished "$name" --figures "$FIG" --why "no time left of the ${BUDGET_S} s budget"
    return
  fi
  echo "== $name (at most ${t} s; $(left) s left)"
  timeout --kill-after=10 "$t" "$@"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    local why="exit status $rc"
    [ "$rc" -eq 124 ] && why="stopped at its ${t} s limit"
    "$PY" bench/gpu_bench.py unfinished "$name" --figures "$FIG" --why "$why"
  fi
}

if [ "$SMOKE" = 1 ]; then
  DEV=(--device cpu --smoke)
  SUITE=(--quick --device cpu --only guided)
  TINY=(--set policy=tiny-random --set rm_backbone=tiny-random --set device=cpu --set bootstrap=20
        --set max_new_tokens=6 --set max_test_prompts=2 --set max_gen_users=2 --set max_pool_prompts=2
        --set shot_curve=[1,2] --set "benchmark={name: rubrics, max_train_prompts: 3, max_test_prompts: 2}")
  DEFAULT_SET=("${TINY[@]}" --set "methods=[global_bt, mpu]" --set "systems={train_fraction: [0.5, 1.0]}")
  SCALE_SET=("${TINY[@]}" --set "methods=[global_bt, {name: pdpo, steps: 1}]" --set "guide_with=[global_bt]"
             --set "systems={train_fraction: [0.5, 1.0]}"
             --set "decoders=[zero_shot, {name: best_of_n, n: 2, pool: 4}, {name: args, k: 2, w: 1.0}]")
  DECODERS_SET=("${TINY[@]}" --set "methods=[global_bt, {name: genarm, steps: 1}]"
                --set "decoders=[zero_shot, {name: args, k: 2}, genarm, {name: best_of_n, n: 2, pool: 4}, icl_rag]")
else
  DEV=(--device cuda)
  SUITE=(--device cuda --dtype bfloat16 --only guided,rm_scoring)
  DEFAULT_SET=()
  SCALE_SET=()
  DECODERS_SET=()
fi

step environment 60 "$PY" bench/gpu_bench.py environment --figures "$FIG"
step anchors 90 "$PY" bench/gpu_bench.py anchors --figures "$FIG" "${DEV[@]}"
step suite 120 "$PY" bench/suite.py "${SUITE[@]}" --out "$DEST/suite.md" --figures "$DEST/suite.json"
if [ -f "$DEST/suite.json" ]; then "$PY" bench/gpu_bench.py suite "$DEST/suite.json" --figures "$FIG"; fi
# the default run from an empty cache, then its rerun with every unit cached
export PERBENCH_CACHE="$DEST/cache-default"
rm -rf "$PERBENCH_CACHE" "$DEST/runs"
step default 150 "$PY" bench/gpu_bench.py run default --rerun --figures "$FIG" --out-dir "$DEST/runs" "${DEFAULT_SET[@]}"
# scale reads the large rubric edition: its extra prompts' base responses ship as pool_more.jsonl; a wheel built
# before they were written gets them here (the bundled policy, about a minute on a GPU)
MORE=$("$PY" -c 'from perbench.data.rubrics.pool_large import MORE_POOL_PATH as p; print(p)')
if want scale && [ "$SMOKE" = 0 ] && [ ! -f "$MORE" ]; then
  step pool_more 120 "$PY" -m perbench build rubrics --size large --out "$MORE"
fi
export PERBENCH_CACHE="$DEST/cache-scale"
rm -rf "$PERBENCH_CACHE"
reserve=0
want decoders && reserve=120  # what scale leaves the decoders run
step scale $(( $(left) - reserve )) "$PY" bench/gpu_bench.py run scale --figures "$FIG" --out-dir "$DEST/runs" \
  "${SCALE_SET[@]}"
export PERBENCH_CACHE="$DEST/cache-decoders"
rm -rf "$PERBENCH_CACHE"
step decoders "$BUDGET_S" "$PY" bench/gpu_bench.py run decoders --figures "$FIG" --out-dir "$DEST/runs" \
  "${DECODERS_SET[@]}"
step shapes 60 "$PY" bench/gpu_bench.py shapes --figures "$FIG" "${DEV[@]}"

"$PY" bench/gpu_bench.py render --figures "$FIG" --out "$DEST/benchmarks-gpu.md"
if [ "$SMOKE" = 0 ]; then
  cp "$DEST/benchmarks-gpu.md" docs/benchmarks-gpu.md
  echo "wrote docs/benchmarks-gpu.md (and $DEST/benchmarks-gpu.md) in $(( $(date +%s) - START )) s"
else
  echo "smoke test: wrote $DEST/benchmarks-gpu.md in $(( $(date +%s) - START )) s (docs/ left as it is)"
  # the smoke test fails when a step did not finish (its reason is on the page)
  "$PY" -c 'import json, sys; u = json.load(open(sys.argv[1])).get("unfinished") or {}
[print(f"smoke test: step {k} did not finish: {v}", file=sys.stderr) for k, v in u.items()]
sys.exit(1 if u else 0)' "$FIG"
fi
