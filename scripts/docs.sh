#!/usr/bin/env bash
# Build the documentation site into docs/_build/html (open docs/_build/html/index.html; it needs no network).
# Creates or refreshes .venv as run.sh and test.sh do. The lessons are executed on the CPU backend, each only
# when its code changed since the last build (jupyter-cache in docs/_build/.jupyter_cache), or taken from
# .cache/executed/ where the test suite already ran them (docs/stage_lessons.py). Warnings are errors.
# Extra arguments go to sphinx-build (e.g. -E to read every page again).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(source "$root/scripts/venv.sh")
IRIS_BACKEND=cpu exec "$root/.venv/bin/python" -m sphinx -W --keep-going -q -b html "$@" \
  "$root/docs" "$root/docs/_build/html"
