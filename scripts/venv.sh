#!/usr/bin/env bash
# Create or refresh the virtual environment at .venv (sourced by run.sh and test.sh).
# It is reinstalled only when pyproject.toml or constraints.txt changed since the last install.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating $venv"
  "${PYTHON:-python3}" -m venv "$venv"
fi
extras="notebook,test"
# The CUDA backend needs cuda-bindings; a machine without a GPU gets torch's CPU build and the interpreter.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then extras="$extras,cuda"; fi
stamp="$venv/.iris-workbench-installed"
want=$(cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -d' ' -f1)-$extras
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing iris-workbench[$extras] into $venv (pinned by constraints.txt)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$root/constraints.txt" -e "$root[$extras]"
  echo "$want" >"$stamp"
fi
