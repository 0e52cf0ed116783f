#!/usr/bin/env bash
# One device call for this session's timings on 2 GPUs (nvidia-h200-x2), one thing at a time (the timings need
# the GPUs to themselves); each writes its section of benchmarks/RESULTS.md, copied to $OUT with the logs:
#   fused-ops.log      benchmarks/fused_ops.py: ctx.ops against G, C, S and torch's fused ops (issue 27's goals)
#   tile.log           benchmarks/tile_all_reduce.py: a GEMM whose epilogue all-reduces its tiles (issue 28)
#   gluon.log          benchmarks/allreduce.py --check, then --gluon: the Gluon collectives against Triton and NCCL
# Carry .whl (matplotlib, for fused_ops' plot). Usage: bash tests/gpu/run_timings_batch.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/iris-timings-batch}
mkdir -p "$out"
# shellcheck source=tests/gpu/install_wheels.sh
source tests/gpu/install_wheels.sh
export PYTHONPATH="$PWD:$PYTHONPATH" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
quiet() { grep -v -E '^W[0-9]{4} |OMP_NUM_THREADS|^\*{5}|FutureWarning|enable_symm_mem_for_group'; }
run() { local seconds=$1 log=$2; shift 2; timeout -k 10 "$seconds" torchrun --nproc_per_node=2 "$@" 2>&1 | quiet >>"$out/$log"
        echo "exit ${PIPESTATUS[0]}: $*" >>"$out/$log"; }
run 330 fused-ops.log benchmarks/fused_ops.py
run 120 tile.log benchmarks/tile_all_reduce.py
run 60 gluon.log benchmarks/allreduce.py --check
run 90 gluon.log benchmarks/allreduce.py --gluon
cp benchmarks/RESULTS.md benchmarks/fused_ops_2gpu.json "$out/"
cp benchmarks/fused_ops_2gpu.png "$out/" 2>/dev/null
tail -n 40 "$out"/*.log
