"""The README's main job: without a screen it runs the quickstart headless and writes its output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
