"""The main job: open the tutorials in JupyterLab, or, where no browser can be opened, run the quickstart
headless and say where its output went.

Run it with ``bash scripts/run.sh`` (or ``python -m workbench.tutorials [--lab | --headless]``).

Examples
--------
>>> python -m workbench.tutorials --headless      # doctest: +SKIP
ran notebooks/00_quickstart.ipynb in 14.2 s
  executed notebook: build/tutorials/00_quickstart.ipynb
  as a web page:     build/tutorials/00_quickstart.html
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
QUICKSTART = NOTEBOOKS / "00_quickstart.ipynb"
OUTPUT = ROOT / "build" / "tutorials"


def can_open_browser() -> bool:
    """Whether this session has a screen a browser could open on (a desktop, not an SSH or CI shell)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_lab() -> int:
    """Start JupyterLab on the tutorials (blocks until the user stops it with Ctrl-C)."""
    lab = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or shutil.which("jupyter")
    if lab is None:
        raise SystemExit("JupyterLab is not installed: pip install 'iris-workbench[notebook]'")
    return subprocess.call([lab, "lab", f"--notebook-dir={NOTEBOOKS}", str(QUICKSTART.relative_to(NOTEBOOKS))])


def run_headless(notebook: Path = QUICKSTART, output: Path = OUTPUT) -> Path:
    """Execute ``notebook`` in a fresh kernel; write the executed notebook and an HTML page under ``output``."""
    import nbclient
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(notebook, as_version=4)
    output.mkdir(parents=True, exist_ok=True)
    executed = output / notebook.name
    started = time.perf_counter()
    try:
        # No widget state: nbconvert would then embed the views as widgets, drawn only by a script fetched
        # from a CDN; without it, the web page (and GitHub, nbviewer) shows each view's static form.
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=False,
                                resources={"metadata": {"path": str(output)}}).execute()
    finally:  # a failing cell's output is worth keeping too
        nbformat.write(nb, executed)
        html, _ = HTMLExporter().from_notebook_node(nb)
        executed.with_suffix(".html").write_text(html)
    print(f"ran {notebook.relative_to(ROOT)} in {time.perf_counter() - started:.1f} s")
    print(f"  executed notebook: {executed.relative_to(ROOT)}")
    print(f"  as a web page:     {executed.with_suffix('.html').relative_to(ROOT)}")
    print(f"the other lessons are in {NOTEBOOKS.relative_to(ROOT)}/; on a desktop this command opens them "
          "in JupyterLab")
    return executed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--lab", action="store_true", help="open JupyterLab even without a screen (e.g. over SSH)")
    mode.add_argument("--headless", action="store_true", help="run the quickstart without a browser")
    args = parser.parse_args(argv)
    if args.lab or (not args.headless and can_open_browser()):
        return open_lab()
    print("no screen to open a browser on: running the quickstart headless (use --lab to start JupyterLab)")
    run_headless()
    return 0


if __name__ == "__main__":
    sys.exit(main())
