#!/usr/bin/env bash
# The piece-cut sweep of benchmarks/fused_ops.py on 2 GPUs (nvidia-h200-x2; NPROC=4 for 4 GPUs): each op group
# with the cuts that could suit it (iris/ops/pieces.py says why), each group its own section of
# benchmarks/RESULTS.md, copied to $OUT when the device tool sets it. Rows to read before changing
# iris.ops.pieces.GROWTH or MAX_PIECES.
# Exits with the first failed sweep's status (the others still run).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rc=0
sweep() {
  torchrun --nproc_per_node="${NPROC:-2}" benchmarks/fused_ops.py "$@" || { status=$?; [ "$rc" -ne 0 ] || rc=$status; }
}
# The overlap goal's rows (M = 8192) by default; SHAPES=... (MxNxK, comma-separated) for others.
shapes=${SHAPES:-8192x8192x8192,8192x28672x8192,8192x8192x28672}
sweep --shapes "$shapes" --ops matmul_all_gather,matmul_all_reduce --chunks 2,3,4 --growth 1,0.6,0.4
sweep --shapes "$shapes" --ops all_gather_matmul --chunks 2,3 --growth 1,4,8,16
sweep --shapes "$shapes" --ops matmul_reduce_scatter --chunks 2,3 --growth 1,0.5
if [ -n "${OUT:-}" ]; then cp benchmarks/RESULTS.md "$OUT/"; fi
exit "$rc"
