"""A 'notebook' that starts a workbench and then ends: normally (``exit``) or by SIGKILL (``kill``), as a
Jupyter kernel shut down or crashed would.

Run by tests/test_workbench.py with ``MODE N``: prints one JSON line with the pids of the cluster's
processes and its folder, then ends. At a normal exit the atexit hook stops the cluster; after a SIGKILL the
engines' watchdogs must end the engines, and the notebook's watcher the controller (whether or not the engines
are still there: a kernel can be killed in the middle of its stop) and remove the folder.
"""

import json
import os
import signal
import sys

import workbench

mode, n = sys.argv[1], int(sys.argv[2])
wb = workbench.start(n=n, backend="cpu", heap_size="4MiB", progress=False)
print(json.dumps({"pids": wb.local_pids(), "cluster_dir": wb.cluster_dir}), flush=True)
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
