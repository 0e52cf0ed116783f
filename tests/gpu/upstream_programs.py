"""What the runners of upstream Iris's programs share: their environment, running one under a time limit, and
the line of its output that says why it failed.

Used by ``tests/gpu/run_upstream_examples.py`` (upstream's ``examples/``) and
``tests/gpu/run_upstream_benchmarks.py`` (upstream's ``benchmark/``); both are run as scripts, from any folder.

Examples
--------
>>> env = program_env(Path("~/src/iris").expanduser(), share_gpus=False)          # doctest: +SKIP
>>> returncode, output, seconds = run_in_own_group(["python3", "x.py"], Path("."), env, timeout=60)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OURS = HERE.parents[1]  # this checkout: its iris is the one upstream's programs must import

# An exception's line, as a rank prints it (torchrun prefixes "[rank1]: "); torchrun's own ChildFailedError only
# says that a rank failed, so the first rank's exception is the one that says why.
EXCEPTION_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([\w.]+\.)?\w*(Error|Exception)\b")


def last_line(output: str) -> str:
    """The first exception line of ``output`` (not torch's ChildFailedError), else its last non-empty line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if EXCEPTION_LINE.match(line) and "ChildFailedError" not in line]
    return (errors[:1] or lines[-1:] or ["(no output)"])[0][:200]


def program_env(upstream: Path, share_gpus: bool, port_offset: int = 0) -> dict:
    """Upstream programs' environment: this project's iris first, then upstream's checkout (for ``examples.common``).

    Upstream's checkout holds its own ``iris`` package too; :func:`iris_imported_from` tells which one is imported.
    ``share_gpus`` and ``port_offset`` turn on the two changes of ``example_shim/sitecustomize.py``.
    """
    shim = share_gpus or port_offset
    paths = [str(OURS), *([str(HERE / "example_shim")] if shim else []), str(upstream.resolve()),
             os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(filter(None, paths)))
    env.update(IRIS_EXAMPLES_SHARE_GPUS="1" if share_gpus else "0", IRIS_EXAMPLES_PORT_OFFSET=str(port_offset))
    return env


def iris_imported_from(upstream: Path, cwd: Path) -> str | None:
    """None when a program run from ``cwd`` imports this project's iris; else where its iris comes from."""
    imported = subprocess.run([sys.executable, "-c", "import iris; print(iris.__file__)"], capture_output=True,
                              text=True, env=program_env(upstream, share_gpus=False), cwd=cwd)
    if OURS in Path(imported.stdout.strip() or ".").resolve().parents:
        return None
    return imported.stdout.strip() or imported.stderr[-300:]


def run_in_own_group(command: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int | None, str, float]:
    """Run ``command`` in a process group of its own: (exit status, None on timeout; its output; seconds).

    Past ``timeout`` the whole group is killed, the processes the program spawned (its ranks) too.
    """
    begin = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the program's own group: its spawned ranks too
        except ProcessLookupError:  # the group ended between the timeout and the kill
            pass
        output, _ = process.communicate()
        returncode = None
    return returncode, output, time.monotonic() - begin
