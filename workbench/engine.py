"""Code that runs inside the engines: one engine is one rank.

The notebook side (:mod:`workbench.cluster`) sends these functions to engines by reference, so every
engine imports this module; it imports ``iris``, ``torch`` and ``triton`` only inside the functions,
after :func:`prepare` has set ``IRIS_BACKEND`` (``import iris`` on a CPU machine switches Triton to its
interpreter, which must happen before any kernel is defined).

The *rank namespace* is the engine's IPython user namespace, so ``%%iris_kernel`` cells, ``%px`` and
``Workbench.pull`` all see the same variables.

Examples
--------
>>> view.apply_sync(engine.prepare, "cpu")                                           # doctest: +SKIP
>>> view.apply_sync(engine.run_cell, "x = rank * 2\\n", "<iris-cell-0123abcd>")       # doctest: +SKIP
{'rank': 0, 'status': 'ok', 'seconds': 1.2e-05, 'error': None}
"""

from __future__ import annotations

import contextlib
import gc
import linecache
import os
import signal
import socket
import sys
import threading
import time
import traceback
import warnings

from . import whereabouts

# The exit status of an engine that ended because its cluster's controller had ended (see _start_watchdog).
CONTROLLER_GONE_EXIT = 75
# Launchers that start engines as one parallel job say which rank each engine is; local engines do not.
_LAUNCHER_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def identify() -> dict:
    """This engine's pid, host and, when its launcher assigned one, its rank in the launch."""
    launcher_rank = next((int(os.environ[v]) for v in _LAUNCHER_RANK_VARIABLES if v in os.environ), None)
    return {"pid": os.getpid(), "host": socket.gethostname(), "launcher_rank": launcher_rank}


# The store that rank 0 serves for a cluster whose ranks span hosts (see open_store), kept for its setup.
_served_store = None


def open_store(world_size: int) -> int:
    """Serve the rendezvous of a cluster whose ranks span hosts from this engine (rank 0); return its TCP port.

    The store binds port 0 itself and keeps the socket, so no other process can take the port between its
    choice and its use. A cluster on one host meets through a file in its private folder instead
    (:func:`meeting_store`): a TCP store takes any connection and has no secret.
    """
    global _served_store
    from datetime import timedelta

    import torch.distributed as dist

    _served_store = dist.TCPStore("0.0.0.0", 0, world_size, is_master=True, wait_for_workers=False,
                                  timeout=timedelta(seconds=600))
    return _served_store.port


def meeting_store(meeting: dict, world_size: int):
    """The torch.distributed store the ranks meet through: ``{"file": path}`` (one host: a file in the cluster's
    0700 folder, which only its user can open) or ``{"host": name, "port": port}`` (served by rank 0's engine,
    :func:`open_store`)."""
    import torch.distributed as dist

    if "file" in meeting:
        return dist.FileStore(meeting["file"], world_size)
    if _served_store is not None and _served_store.port == meeting["port"]:
        return _served_store
    from datetime import timedelta

    return dist.TCPStore(meeting["host"], meeting["port"], world_size, is_master=False,
                         timeout=timedelta(seconds=600))


def prepare(backend: str, notebook: dict | None = None) -> dict:
    """Import torch, triton and iris with the backend chosen, then :func:`identify` this engine.

    Importing takes seconds; the notebook sends this to each engine as soon as it registers, which
    overlaps the imports with the other engines' start-up. ``notebook`` holds the notebook kernel's ``host``
    and ``pid`` and, for a local controller, its ``controller_pid``: on the notebook's host a watchdog then
    ends this engine if the notebook dies without stopping the cluster (the notebook's own watcher ends the
    controller), so a crashed notebook leaves nothing behind, and if the controller has ended. Local
    engines do not end themselves when the controller falls silent (see ``workbench.cluster``), so the
    watchdog starts here, as soon as the engine has registered.
    """
    if notebook is not None and notebook["host"] == socket.gethostname():
        _start_watchdog(notebook["pid"], notebook.get("controller_pid"))
    if backend != "auto":
        os.environ["IRIS_BACKEND"] = backend
    import torch  # noqa: F401

    import iris  # noqa: F401  (decides interpreter or GPU before any kernel exists)
    import iris.language.gluon  # noqa: F401

    # Keep the collector away from the import-time objects (none is garbage): IPython's shutdown
    # collects several times, which with torch and triton loaded made every engine take > 1 s to stop.
    gc.freeze()
    return identify()


def setup(rank: int, world_size: int, meeting: dict, backend: str, heap_size: int, notebook: dict,
          check: str | None = None, host: str | None = None, local: tuple = (0, 1)) -> dict:
    """Join the ranks' host group through ``meeting`` (:func:`meeting_store`), create this rank's ``Iris``
    context (collective) and fill the rank namespace.

    ``check`` is the context's (``"races"``; None: ``IRIS_CHECK`` decides, as for any iris program). The
    workbench shows the races after each cell itself, so the checker's warnings are not printed as well.

    ``host``: the simulated host (``IRIS_HOST``, :func:`iris.heap.topology.this_host`) of a cluster started with
    ``hosts=``; ``local``: ``(LOCAL_RANK, LOCAL_WORLD_SIZE)``, this rank among the ranks of its host.

    With ``hang_channel`` in ``notebook``, a thread answers where this rank is when a cell hangs
    (:mod:`workbench.whereabouts`).
    From here on SIGTERM ends the engine with status 0 (see :func:`exit_cleanly`).
    """
    prepare(backend)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(local[0]),
                       "LOCAL_WORLD_SIZE": str(local[1])})
    if host is not None:
        os.environ["IRIS_HOST"] = host
    import torch
    import triton
    import triton.language as tl
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    import iris
    from iris.base.distributed import HostGroup
    from iris.language.gluon import IrisDeviceCtx

    HostGroup.join(meeting_store(meeting, world_size), rank, world_size)
    ctx = iris.iris(heap_size, backend=None if backend == "auto" else backend, check=check)
    warnings.filterwarnings("ignore", category=iris.RaceWarning)
    _namespace().update({
        "ctx": ctx, "rank": rank, "world_size": world_size, "iris": iris, "torch": torch,
        "triton": triton, "tl": tl, "gluon": gluon, "gl": gl,
        "DeviceContext": iris.DeviceContext, "IrisDeviceCtx": IrisDeviceCtx, "TraceEvent": iris.TraceEvent,
    })
    if notebook.get("hang_channel") and whereabouts.available():
        try:
            whereabouts.start(notebook["hang_channel"], rank, ctx, _namespace())
        except Exception as exc:  # the rank works without it; a hang report will say it got no answer
            print(f"rank {rank}: the hang report's thread did not start: {exc!r}", file=sys.stderr)
    _exit_on_sigterm()
    return {"rank": rank, "backend": ctx.backend, "device": str(ctx.device), "check": ctx.check}


def _namespace() -> dict:
    from IPython import get_ipython

    return get_ipython().user_ns


def exit_cleanly() -> None:
    """End this engine with exit status 0 as soon as this request has returned: how the workbench stops a rank.

    ipyparallel's own ways to stop an engine, SIGTERM and a shutdown request, stop the event loop that its
    engine app runs with ``run_sync``, which then raises "RuntimeError: Event loop stopped before Future
    completed": the engine logs that traceback and exits with status 1 after every stop. A SystemExit
    raised by a callback of that loop unwinds the app instead, so the process ends the normal way: atexit
    handlers run (iris destroys its process group there) and the exit status is 0.
    """
    _main_loop().call_soon(_exit_now)


def _exit_on_sigterm() -> None:
    """Make SIGTERM end this engine as :func:`exit_cleanly` does, in place of ipyparallel's handler.

    SIGTERM is how a stop escalates (and how ``ipcluster stop`` stops engines). The exit waits for the loop,
    so a cell that is running finishes first, as it would with ipyparallel's handler.
    """
    loop = _main_loop()
    signal.signal(signal.SIGTERM, lambda signum, frame: loop.call_soon_threadsafe(_exit_now))


def _main_loop():
    import asyncio

    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("the engine's event loop runs requests on its main thread, but this runs elsewhere")
    return asyncio.get_running_loop()


def _exit_now() -> None:
    # Whatever is printed while the interpreter shuts down goes to the engine's log file (shown by the
    # notebook if the stop goes wrong), not to a notebook cell that is no longer listening.
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    raise SystemExit(0)


def _start_watchdog(notebook_pid: int, controller_pid: int | None) -> None:
    """End this engine once ``notebook_pid`` has ended, or once the local controller ``controller_pid`` has
    ended: no request can reach it any more.

    Whether the controller has *ended* is asked of the system, not of its heartbeat: a controller that is
    merely slow (cores shared with other clusters) keeps its engines.
    """
    from .shutdown import process_gone

    def watch():
        while not process_gone(notebook_pid):
            if controller_pid is not None and process_gone(controller_pid):
                os._exit(CONTROLLER_GONE_EXIT)
            time.sleep(1.0)
        os._exit(0)  # the heap files are already unlinked: exiting frees everything

    threading.Thread(target=watch, name="iris-notebook-watchdog", daemon=True).start()


# -- running cells -------------------------------------------------------------------------------

def register_source(source: str, filename: str) -> None:
    """Make ``source`` findable under ``filename``, as Triton and Gluon need to compile kernels defined in it.

    ``mtime=None`` keeps ``linecache.checkcache`` from evicting the entry, so tracebacks and later
    recompilations still find the lines.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def run_cell(source: str, filename: str) -> dict:
    """Run ``source`` in the rank namespace; return the rank, status, seconds and a formatted error.

    Status is ``"ok"``, ``"error"`` or ``"interrupted"`` (KeyboardInterrupt, i.e. SIGINT from the
    notebook). Output goes to this engine's stdout/stderr, which ipyparallel forwards to the notebook.
    """
    register_source(source, filename)
    namespace = _namespace()
    status, error = "ok", None
    start = time.perf_counter()
    try:
        with _compiler_messages(namespace), whereabouts.running_cell(filename):
            exec(compile(source, filename, "exec"), namespace)
    except KeyboardInterrupt as exc:
        status, error = "interrupted", format_error(exc, filename)
    except BaseException as exc:  # noqa: B036  (SystemExit too: a cell must not end the engine)
        status, error = "error", format_error(exc, filename)
        _add_fault_note(error, namespace.get("ctx"))
    finally:
        seconds = time.perf_counter() - start
        sys.stdout.flush()
        sys.stderr.flush()
    return {"rank": namespace.get("rank"), "status": status, "seconds": seconds, "error": error}


def run_stepped_cell(source: str, filename: str, address: str) -> dict:
    """:func:`run_cell`, with this rank held before every access to a symmetric heap until the coordinator at
    ``address`` (the notebook's :class:`workbench.stepping.SteppedRun`) lets it go; heap tensors are called by the
    rank's variables holding them."""
    from iris.instruments.stepping import stepped

    from .widgets.probes import variable_names

    namespace = _namespace()
    ctx = namespace["ctx"]

    def namer(offset: int) -> str | None:
        return ", ".join(variable_names(namespace, ctx).get(offset, [])) or None

    with stepped(ctx, address, namer=namer):
        return run_cell(source, filename)


def _add_fault_note(error: dict, ctx) -> None:
    """On a GPU rank of a world spanning several hosts, a fault (illegal address, device assertion) gets a note naming
    the ranks this rank cannot address (:func:`iris.heap.reach.fault_note`): on a GPU a kernel cannot raise the
    clear error the CPU backend gives."""
    if getattr(ctx, "backend", None) != "cuda":
        return
    from iris.heap.reach import fault_note

    note = fault_note(ctx.topology, ctx.cur_rank, error["message"])
    if note:
        error["message"] += f"\n{note}"
        error["traceback"] += f"{note}\n"


def _compiler_messages(namespace: dict):
    """On a GPU rank, :func:`iris.language.gluon.layout_hints` around the cell: what the GPU compiler writes to file
    descriptor 2 (MLIR's reason for a failed pass) reaches the cell's stderr instead of the engine's log, and
    a layout-less Gluon range that nothing anchors fails with advice instead of "PassManager::run failed".
    The CPU interpreter compiles nothing."""
    if getattr(namespace.get("ctx"), "backend", None) != "cuda":
        return contextlib.nullcontext()
    from iris.language.gluon import layout_hints

    return layout_hints()


def format_error(exc: BaseException, cell_filename: str) -> dict:
    """``{"type", "message", "traceback"}`` with frames in the cell shown with their lines.

    Frames of this module are dropped; runs of library frames (triton, torch...) between cell frames are
    folded into one line naming the libraries; the frame that raised is kept, except for an interrupt.
    """
    te = traceback.TracebackException.from_exception(exc, capture_locals=False)
    text = "".join(_format_chain(te, cell_filename))
    return {"type": type(exc).__name__, "message": str(exc), "traceback": text}


def _format_chain(te: traceback.TracebackException, cell_filename: str) -> list[str]:
    lines = []
    if te.__cause__ is not None:
        lines += _format_chain(te.__cause__, cell_filename)
        lines.append("\nThe above exception was the direct cause of the following exception:\n\n")
    elif te.__context__ is not None and not te.__suppress_context__:
        lines += _format_chain(te.__context__, cell_filename)
        lines.append("\nDuring handling of the above exception, another exception occurred:\n\n")
    frames = [f for f in te.stack if f.filename != __file__]
    if frames:
        lines.append("Traceback (most recent call last):\n")
        # Where an interrupt landed inside a library differs from rank to rank and says nothing.
        lines += _format_frames(frames, cell_filename, show_last=te.exc_type is not KeyboardInterrupt)
    lines += list(te.format_exception_only())
    return lines


def _format_frames(frames, cell_filename: str, show_last: bool) -> list[str]:
    lines, folded = [], []

    def flush_folded():
        if folded:
            lines.append(f"  ... in {', '.join(sorted({whereabouts.library_name(f.filename) for f in folded}))}\n")
            folded.clear()

    for i, frame in enumerate(frames):
        if frame.filename == cell_filename or (show_last and i == len(frames) - 1):
            flush_folded()
            where = "cell" if frame.filename == cell_filename else frame.filename
            lines.append(f"  {where}, line {frame.lineno}, in {frame.name}\n")
            if frame.line:
                lines.append(f"    {frame.line.strip()}\n")
        else:
            folded.append(frame)
    flush_folded()
    return lines



# -- looking at values -----------------------------------------------------------------------------

def pull(expression: str):
    """Evaluate ``expression`` in the rank namespace; tensors (also inside lists, tuples, dicts) come back
    as CPU copies, detached from the heap."""
    return _to_host(eval(expression, _namespace()))


def _to_host(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, list | tuple):
        return type(value)(_to_host(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    return value


def summarize(name: str, values: int = 6) -> str:
    """One line about variable ``name``: shape, dtype, device and first values of a tensor, else its repr."""
    namespace = _namespace()
    if name not in namespace:
        return f"<no variable {name!r} on this rank>"
    value = namespace[name]
    import torch

    if isinstance(value, torch.Tensor):
        flat = value.detach().flatten()
        head = ", ".join(_short(v) for v in flat[:values].cpu().tolist())
        more = ", ..." if flat.numel() > values else ""
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')} {value.device} [{head}{more}]"
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def heap_usage() -> dict:
    """This rank's heap: size, bytes used and free, the largest free block, backend and device."""
    ctx = _namespace()["ctx"]
    usage = ctx.heap_usage()
    return {"size": ctx.heap_size, "used": usage.used, "free": usage.free, "largest_free": usage.largest_free,
            "allocations": usage.allocations, "backend": ctx.backend, "device": str(ctx.device)}
