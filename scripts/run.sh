#!/usr/bin/env bash
# Set up .venv and run the main job: a demo of the symmetric heap on 4 CPU ranks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/venv.sh"
cd "$root"
exec "$root/.venv/bin/python" -m torch.distributed.run --standalone --nproc_per_node="${NPROC:-4}" \
  examples/heap_demo.py
