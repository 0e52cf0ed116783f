#!/usr/bin/env bash
# Set up .venv and run the main job: open the tutorials in JupyterLab, or, without a screen, run the
# quickstart lesson headless and say where its output went. Extra arguments: --lab or --headless.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/venv.sh"
cd "$root"
exec "$root/.venv/bin/python" -m workbench.tutorials "$@"
