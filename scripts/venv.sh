#!/usr/bin/env bash
# Create or refresh a virtual environment (sourced by run.sh and test.sh).
#   IRIS_VENV         where (default .venv at the repository root)
#   IRIS_CONSTRAINTS  a file of pins that replace constraints.txt's for the packages it names (default: none):
#                     test.sh's second stage uses constraints-newest.txt, the newest triton and numpy we support
# It is reinstalled only when pyproject.toml or the constraints changed since the last install.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${IRIS_VENV:-$root/.venv}"
overlay="${IRIS_CONSTRAINTS:-}"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating $venv"
  "${PYTHON:-python3}" -m venv "$venv"
fi
extras="notebook,test"
# docs: the documentation site (scripts/docs.sh, tests/test_site.py), built on the default stack only.
if [ -z "$overlay" ]; then extras="$extras,docs"; fi
# The CUDA backend needs cuda-bindings; a machine without a GPU gets torch's CPU build and the interpreter.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then extras="$extras,cuda"; fi
# constraints.txt, with the pins of the overlay file (if any) in place of its own for the same packages.
constraints="$venv/.iris-workbench-constraints.txt"
if [ -n "$overlay" ]; then
  overridden=$(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' "$overlay" | paste -sd'|')
  { grep -v -i -E "^($overridden)==" "$root/constraints.txt"; cat "$overlay"; } >"$constraints.new"
else
  cp "$root/constraints.txt" "$constraints.new"
fi
mv "$constraints.new" "$constraints"
stamp="$venv/.iris-workbench-installed"
want=$(cat "$root/pyproject.toml" "$constraints" | sha256sum | cut -d' ' -f1)-$extras
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing iris-workbench[$extras] into $venv (pinned by constraints.txt${overlay:+ and $(basename "$overlay")})"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$constraints" -e "$root[$extras]"
  echo "$want" >"$stamp"
fi
