#!/usr/bin/env bash
# One device call that checks a change on GPUs: upstream Iris's examples, lessons and GPU tests, side by side.
# Correctness only: the streams share the GPUs, so no timing printed here is a measurement.
#   bash tests/gpu/run_gpu_batch.sh UPSTREAM_DIR SECONDS [LESSON ...] [-- PYTEST_ARGS ...]
# UPSTREAM_DIR: a checkout of upstream Iris (carried; nothing of it is in this repository). SECONDS: the time
# everything must end in (the device call's limit, less a margin). Carry .whl (tests/gpu/install_wheels.sh).
# Writes to $OUT: upstream.md (the table), upstream.log (each example's output), lessons.log, gpu-tests.log.
#   stream 1: tests/gpu/run_upstream_examples.py, 3 examples at once, each with every rank on its own GPU
#             when the machine has as many GPUs as ranks
#   stream 2: the lessons named (tests/gpu/run_notebooks.py)
# then, once both have ended, pytest on PYTEST_ARGS alone on the GPUs (some of its tests time kernels).
set -uo pipefail
cd "$(dirname "$0")/../.."
upstream=$1 seconds=$2
shift 2
lessons=() tests=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do lessons+=("$1"); shift; done
[ $# -gt 0 ] && shift && tests=("$@")
out=${OUT:-/tmp/iris-gpu-batch}
mkdir -p "$out"
# shellcheck source=tests/gpu/install_wheels.sh
source tests/gpu/install_wheels.sh
export PYTHONPATH="$PWD:$PYTHONPATH" PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__,
      'numpy', numpy.__version__, 'gpus', torch.cuda.device_count())"
deadline=$((SECONDS + seconds))
left() { local s=$((deadline - SECONDS)); echo $((s > 1 ? s : 1)); }  # timeout 0 would mean no limit

timeout -k 10 "$seconds" python3 tests/gpu/run_upstream_examples.py "$upstream" --ranks 2 --jobs 3 \
  --timeout 150 --log "$out/upstream.log" --markdown "$out/upstream.md" >"$out/upstream-table.txt" 2>&1 &
examples=$!

{
  if [ ${#lessons[@]} -gt 0 ]; then
    timeout -k 10 $(left) python3 tests/gpu/run_notebooks.py "${lessons[@]}"
    echo "lessons exit $?"
  fi
} >"$out/lessons.log" 2>&1
wait "$examples"
echo "examples exit $?" >>"$out/upstream-table.txt"
if [ ${#tests[@]} -gt 0 ]; then
  timeout -k 10 $(left) python3 -m pytest -q -o addopts="" -p no:cacheprovider "${tests[@]}" \
    >"$out/gpu-tests.log" 2>&1
  echo "pytest exit $?" >>"$out/gpu-tests.log"
fi
cat "$out/upstream-table.txt"
tail -5 "$out/lessons.log" "$out/gpu-tests.log" 2>/dev/null
echo "heap files left in /dev/shm: $(find /dev/shm -maxdepth 1 -name 'iris-workbench*' | wc -l)"
