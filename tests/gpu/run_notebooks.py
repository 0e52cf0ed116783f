"""Run the tutorials top to bottom on a GPU machine, where nbclient and a Jupyter kernel are not installed.

Each notebook's code cells run in order in one IPython shell (the magics, the ranks and the widgets are the
real ones; widgets are built but nothing renders them). Stops at the first failing cell of a notebook,
reports it, and goes on with the next notebook. Exit status 1 if any failed.

    source tests/gpu/install_wheels.sh && python3 tests/gpu/run_notebooks.py notebooks/*.ipynb
"""

from __future__ import annotations

import json
import os
import sys
import time

from IPython.core.interactiveshell import InteractiveShell


def run_notebook(shell, path: str) -> bool:
    started = time.perf_counter()
    cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
    for number, cell in enumerate(cells, 1):
        source = "".join(cell["source"])
        if not shell.run_cell(source).success:
            print(f"FAILED {path}: code cell {number}:\n{source}", flush=True)
            shell.run_cell("import workbench\nif workbench.session._current is not None:\n"
                           "    workbench.session._current.stop()")
            return False
    print(f"OK {path} in {time.perf_counter() - started:.1f} s", flush=True)
    return True


def main(paths) -> int:
    os.environ["IRIS_WORKBENCH_SOLUTIONS"] = "run"  # %iris solution NN runs the exercise's solution: no one reads
    shell = InteractiveShell.instance()
    results = {path: run_notebook(shell, path) for path in paths}
    print(f"{sum(results.values())} passed, {len(results) - sum(results.values())} failed")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
