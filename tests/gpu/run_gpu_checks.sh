#!/usr/bin/env bash
# GPU checks, run on a lent GPU machine through the device tool, e.g.
#   IRIS_GPU_WORLD=4 bash tests/gpu/run_gpu_checks.sh      # nvidia-h100-x1: 4 ranks share the GPU
#   bash tests/gpu/run_gpu_checks.sh                        # nvidia-h200-x2: one rank per GPU
# The machine's own python3 has torch, triton 3.6.0, cuda-bindings and pytest; iris runs from the checkout.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())"
out=${OUT:-/tmp}
python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/gpu "$@" 2>&1 | tee "$out/gpu-tests.log"
rc=${PIPESTATUS[0]}
leftover=$(ls /dev/shm | grep -c '^iris-workbench-heap' || true)
echo "heap files left in /dev/shm: $leftover"
exit "$rc"
