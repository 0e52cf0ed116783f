"""A 'notebook' that starts a workbench and then dies by SIGKILL, as a crashed Jupyter kernel would.

Run by tests/test_workbench.py: prints one JSON line with the pids it leaves behind (the controller,
the engines and everything under them), then kills itself. The engines' watchdog must end them all.
"""

import json
import os
import signal
import sys

import workbench

wb = workbench.start(n=int(sys.argv[1]), backend="cpu", heap_size="4MiB", progress=False)
print(json.dumps(wb.local_pids()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
