#!/usr/bin/env bash
# Issue 44's performance batch, at every world size the machine has: one rank per GPU at 8 and 4 ranks where there are
# that many GPUs, and 2 ranks (GPUs 0 and 1); never ranks sharing a GPU. One device call:
#   [WORLDS="4 2"] bash tests/gpu/run_world_sizes_batch.sh [SECONDS] [STEPS]
# STEPS (default "floor engines tune peers others fused lessons"): benchmarks/latency_floor.py,
# benchmarks/copy_engines.py (the copy engines' ceiling), benchmarks/tune_ccl.py (the shipped table's rows of this
# world size, every collective, bf16 and fp32), benchmarks/allreduce.py --peers (bf16) and --others (each with the
# copy-engine ceiling from 64 MiB), benchmarks/fused_ops.py, the lessons' steps benchmarks (07, 10, 11, 12, 13, 14, 15); each writes its
# RESULTS.md section (or lesson block) per world size. WORLDS (default "8 4 2") picks the world sizes, the largest
# first (2 ranks are measured most often). The GPUs' SM clocks are sampled every second into clocks.csv, so that a
# slow run shows whether its clocks were low. Logs, RESULTS.md and the tables go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/iris-world-sizes}
mkdir -p "$out"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
deadline=$((SECONDS + ${1:-560}))
steps=${2:-floor engines tune peers others fused lessons}
quiet() { grep -v -E '^W[0-9]{4} |OMP_NUM_THREADS|^\*{5}|^\[Iris\]|_warn_once|Profiler clears'; }
left() { local s=$((deadline - SECONDS)); echo $((s > 1 ? s : 1)); }
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 1000 >"$out/clocks.csv" 2>&1 &
sampler=$!
trap 'kill $sampler 2>/dev/null; cp benchmarks/RESULTS.md iris/ccl/tables/*.json "$out/"' EXIT

run() {  # run WORLD STEP[:LOG] LIMIT SCRIPT ARGS...: one step at WORLD ranks, within LIMIT seconds and the batch's time
  local world=$1 step=${2%%:*} name=${2#*:} limit=$3; shift 3
  case " $steps " in *" $step "*) ;; *) return 1 ;; esac
  local t
  t=$(left)
  t=$((limit < t ? limit : t))
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((world - 1))) timeout -k 5 "$t" torchrun --nproc_per_node="$world" "$@" 2>&1 \
    | quiet >"$out/$name-$world.log"
  echo "$name at $world ranks: exit ${PIPESTATUS[0]} at $SECONDS s" | tee -a "$out/$name-$world.log"
}

for world in ${WORLDS:-8 4 2}; do
  [ "$gpus" -ge "$world" ] || continue
  run "$world" floor 60 benchmarks/latency_floor.py
  run "$world" engines 60 benchmarks/copy_engines.py
  IRIS_TUNE_BUDGET=60 run "$world" tune 180 benchmarks/tune_ccl.py
  run "$world" peers 120 benchmarks/allreduce.py --peers --dtypes bf16
  run "$world" others 150 benchmarks/allreduce.py --others
  run "$world" fused 400 benchmarks/fused_ops.py
  for lesson in 07 11 12 13 15; do
    run "$world" "lessons:lesson$lesson" 120 "benchmarks/lesson${lesson}_steps.py" --write
  done
  run "$world" lessons:lesson14 120 benchmarks/lesson14_all_gather.py
  run "$world" lessons:lesson10 120 benchmarks/lesson10_steps.py --json "$out/lesson10-$world.json" \
    && python benchmarks/lesson10_steps.py --report "$out/lesson10-$world.json" --write >>"$out/lesson10-$world.log"
done
