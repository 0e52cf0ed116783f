"""The README's main job: without a screen it runs the quickstart headless and writes its output."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from bs4 import BeautifulSoup
from PIL import Image

from .multirank import ROOT

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def test_main_job_runs_the_quickstart_headless(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}  # no DISPLAY: headless
    out = subprocess.run([sys.executable, "-m", "workbench.tutorials"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "running the quickstart headless" in out.stdout and "build/tutorials/00_quickstart.html" in out.stdout
    executed = json.loads((ROOT / "build/tutorials/00_quickstart.ipynb").read_text())
    outputs = "".join(str(o) for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"])
    assert "exercise solved" in outputs and "error" not in {o.get("output_type") for c in executed["cells"]
                                                            if c["cell_type"] == "code" for o in c["outputs"]}
    # A newcomer's last cell: one line, none of the engines' logs.
    stop = [c for c in executed["cells"] if "".join(c["source"]).strip() == "%iris stop"]
    printed = "".join("".join(o.get("text", "")) for o in stop[0]["outputs"])  # stored as a str or lines
    assert re.fullmatch(r"stopped 2 ranks \((cpu|cuda) backend\): each exited with status 0; no process.* left\n",
                        printed), printed
    assert not [word for word in ("CRITICAL", "Traceback", "signal 15") if word in outputs]
    # The start's progress bar gave way to its outcome: no bar frozen at 0% in the saved notebook.
    start = next(c for c in executed["cells"] if c["cell_type"] == "code" and "%iris start" in "".join(c["source"]))
    shown = [o["data"]["text/plain"] for o in start["outputs"] if o["output_type"] == "display_data"]
    assert len(shown) == 1 and re.fullmatch(r"2 ranks ready in \d+\.\d s", "".join(shown[0])), shown
    see_it = next(c for c in executed["cells"] if "".join(c["source"]) == "%iris show inbox")
    twin, widget = see_it["outputs"]  # the static form that GitHub and nbviewer show, and the widget
    assert "iris-static" in "".join(twin["data"]["text/html"])
    assert "application/vnd.jupyter.widget-view+json" in widget["data"]
    assert "widgets" not in executed["metadata"]  # no widget state: renderers fall back to the static form
    check_buffers_are_visible((ROOT / "build/tutorials/00_quickstart.html").read_text())


def check_buffers_are_visible(page: str) -> None:
    """The web page's "See it" cell shows each rank's inbox as a picture, and their values, in the page
    itself (nothing for a script to draw)."""
    cells = BeautifulSoup(page, "html.parser").select(".jp-CodeCell")
    [see_it] = [c for c in cells if c.select_one(".jp-InputArea-editor").get_text().strip() == "%iris show inbox"]
    pictures = [np.asarray(Image.open(io.BytesIO(base64.b64decode(img["src"].split(",", 1)[1]))).convert("L"))
                for img in see_it.select(".jp-OutputArea .iris-rank-panel img")]
    assert len(pictures) == 2 and all(p.std() > 10 for p in pictures)  # a picture per rank, not a blank
    assert not np.array_equal(*pictures)  # rank 0's inbox holds 2.0, rank 1's 1.0
    rows = [row.get_text(" ") for row in see_it.select("table.iris-values tr")]
    assert rows[1].startswith("rank 0 2 2") and rows[2].startswith("rank 1 1 1")
