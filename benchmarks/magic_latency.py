"""Round trip of a warm ``%%iris_kernel`` cell against ipyparallel's own ``%%px``, plus cold start-up.

Both magics run the same cell on the same 4 engines through one IPython shell, alternately (so drift
hits both alike), with output captured; the median of many runs is reported. Rows: an empty cell (the
magics' own overhead) and a cell launching a small Triton kernel. Cold start is ``workbench.start(n)``
from nothing to every rank holding its ``Iris`` context, with a plain ipyparallel cluster start (default
settings, no torch) beside it. The table goes to benchmarks/RESULTS.md.

Run::

    python benchmarks/magic_latency.py              # 4 ranks, auto backend
    python benchmarks/magic_latency.py --backend cpu --repeats 40
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.results import environment, write_section  # noqa: E402

SETUP = """
x = torch.arange(256, dtype=torch.float32, device=ctx.get_device())
y = torch.empty_like(x)

@triton.jit
def scale(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)
"""
CELLS = {
    "empty cell (`pass`)": "pass",
    "small Triton kernel (256 elements, 1 program)": "scale[(1,)](x, y, BLOCK=256)",
}


def cold_start_ipyparallel(n: int) -> float:
    """Seconds for ipyparallel alone (default settings) to start n engines and see them registered."""
    import ipyparallel as ipp

    started = time.perf_counter()
    cluster = ipp.Cluster(n=n, log_level=30)
    client = cluster.start_and_connect_sync()
    seconds = time.perf_counter() - started
    client.close()
    cluster.stop_cluster_sync()
    return seconds


def timed_cell(shell, cell: str) -> float:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        started = time.perf_counter()
        result = shell.run_cell(cell, store_history=False)
        seconds = time.perf_counter() - started
    if not result.success:
        raise RuntimeError(f"benchmark cell failed: {cell!r}: {result.error_in_exec!r}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=30, help="runs of each cell with each magic")
    args = parser.parse_args()

    from IPython.core.interactiveshell import InteractiveShell

    import workbench

    baseline_start = cold_start_ipyparallel(args.n)
    started = time.perf_counter()
    wb = workbench.start(n=args.n, backend=args.backend, heap_size="16MiB", progress=False)
    cold_start = time.perf_counter() - started
    backend = wb.rank_info[0]["backend"]
    try:
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "workbench")
        view = wb.client[wb.engine_ids]
        view.block = True
        view.activate()  # registers %%px on these engines
        wb.run(SETUP).raise_on_failure()
        rows = []
        for label, body in CELLS.items():
            magics = {"%%px": f"%%px\n{body}", "%%iris_kernel": f"%%iris_kernel\n{body}"}
            times = {name: [] for name in magics}
            for cell in magics.values():  # warm-up: first compilation, first messages
                timed_cell(shell, cell)
            for _ in range(args.repeats):
                for name, cell in magics.items():
                    times[name].append(timed_cell(shell, cell))
            px, ours = (statistics.median(times[name]) * 1e3 for name in ("%%px", "%%iris_kernel"))
            rows.append(f"| {label} | {px:.1f} | {ours:.1f} | {ours / px:.2f}x |")
            print(rows[-1], flush=True)
    finally:
        wb.stop()

    body = "\n".join([
        f"{environment()}; CPU model: {_cpu_model()}, {os.cpu_count()} cores; ipyparallel "
        f"{_version('ipyparallel')}, IPython {_version('IPython')}; {args.n} ranks, {backend} backend.",
        "",
        f"Warm round trip through an IPython shell, median of {args.repeats} runs each, output captured "
        "(goal: `%%iris_kernel` at most 1.3x `%%px`).",
        "",
        "| cell | `%%px` ms | `%%iris_kernel` ms | ratio |",
        "|---|---|---|---|",
        *rows,
        "",
        "| cold start | seconds |",
        "|---|---|",
        f"| `workbench.start(n={args.n})`: controller, engines, torch/triton/iris imports, heaps | "
        f"{cold_start:.1f} |",
        f"| ipyparallel alone, default settings (no torch, no heaps) | {baseline_start:.1f} |",
    ])
    print(body)
    print("written to", write_section("magic_latency (benchmarks/magic_latency.py)", body))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str:
    return __import__(module).__version__


if __name__ == "__main__":
    main()
