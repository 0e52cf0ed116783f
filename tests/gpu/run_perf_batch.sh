#!/usr/bin/env bash
# One device call for issue 27 ("Fast, and seen to be fast") on a machine with a GPU per rank (2 GPUs):
#   bash tests/gpu/run_perf_batch.sh UPSTREAM_DIR SECONDS
# UPSTREAM_DIR: a checkout of upstream Iris (carried; nothing of it is in this repository). SECONDS: the time
# everything must end in. Carry .whl (tests/gpu/install_wheels.sh). One thing at a time, since the timings need
# the GPUs to themselves; each step's output goes to $OUT:
#   bench-view.log   benchmarks/bench_view_check.py: the bench view's time against the benchmarks' for the same calls
#   lesson14.log     benchmarks/lesson14_all_gather.py: lesson 14's steps against NCCL (and RESULTS.md's section)
#   gpu-tests.log    the GPU tests of iris.perf and the traffic matrix
#   upstream-benchmarks.md / .log   upstream's benchmark/ programs, unchanged, on iris.bench
#   lessons.log      lessons 14 and 10 top to bottom on the GPUs (and those named in $LESSONS)
set -uo pipefail
cd "$(dirname "$0")/../.."
upstream=$1 seconds=$2
out=${OUT:-/tmp/iris-perf-batch}
mkdir -p "$out"
# shellcheck source=tests/gpu/install_wheels.sh
source tests/gpu/install_wheels.sh
export PYTHONPATH="$PWD:$PYTHONPATH" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
deadline=$((SECONDS + seconds))
left() { local s=$((deadline - SECONDS)); echo $((s > 1 ? s : 1)); }
quiet() { grep -v -E '^W[0-9]{4} |OMP_NUM_THREADS|^\*{5}'; }

timeout -k 10 120 torchrun --nproc_per_node=2 benchmarks/bench_view_check.py 2>&1 | quiet >"$out/bench-view.log"
timeout -k 10 90 torchrun --nproc_per_node=2 benchmarks/lesson14_all_gather.py 2>&1 | quiet >"$out/lesson14.log"
cp benchmarks/RESULTS.md "$out/RESULTS.md"
timeout -k 10 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_perf_cuda.py tests/gpu/test_traffic_cuda.py \
  >"$out/gpu-tests.log" 2>&1
# The lessons whose GPU cells have not run on GPUs yet first (14: the bench view in engines; 10: its timing
# cell), then the others, then upstream's programs in what time is left.
timeout -k 10 $(($(left) / 2)) python3 tests/gpu/run_notebooks.py notebooks/14_making_a_kernel_fast.ipynb \
  notebooks/10_tp_all_reduce_decode.ipynb ${LESSONS:-} >"$out/lessons.log" 2>&1
echo "lessons exit $?" >>"$out/lessons.log"
timeout -k 10 $(($(left) - 10)) python3 tests/gpu/run_upstream_benchmarks.py "$upstream" --timeout 90 \
  --log "$out/upstream-benchmarks.log" --markdown "$out/upstream-benchmarks.md" >"$out/upstream-benchmarks.txt" 2>&1
tail -n 4 "$out"/*.log "$out/upstream-benchmarks.txt"
