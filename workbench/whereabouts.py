"""Where a busy rank is, asked from outside while its main thread runs a cell: the engine side of the hang report.

A rank stuck in a cell is busy on its main thread, so ipyparallel cannot run anything on it. :func:`start`
gives the engine a daemon thread that answers "where are you?" on a private channel: an abstract AF_UNIX
socket (Linux), named after a random token the notebook made for this cluster. Abstract sockets have no file,
so nothing is left behind however the engine ends (clean stop, restart, SIGKILL, a crashed notebook); as they
have no file permissions either, the thread answers only peers of its own user (``SO_PEERCRED``).

The answer (:meth:`Whereabouts.where`, a JSON-able dict) comes from the main thread's Python stack
(``sys._current_frames()``) and, on the CPU interpreter, from :class:`KernelWatch`, an observer of the
interpreter's accesses that remembers per thread the launched kernel, the program and the last load or atomic
(so the report can name the polled allocation and element and read its current value); on a GPU from
:class:`GpuWatch`: the last kernel launched (Triton's launch hook) and the heap's small allocations copied on a
separate stream. The awaited value comes from the loop condition (:func:`awaited_value`).

Examples
--------
>>> start("iris-workbench-hang-0123abcd", rank=1, ctx=ctx, namespace=get_ipython().user_ns)   # doctest: +SKIP
>>> ask("iris-workbench-hang-0123abcd", 1, timeout=2.0)["state"]       # from the notebook    # doctest: +SKIP
'polling'
"""

from __future__ import annotations

import ast
import atexit
import bisect
import contextlib
import inspect
import json
import linecache
import os
import socket
import struct
import sys
import sysconfig
import textwrap
import threading
import time
from tokenize import TokenError

CHANNEL_PREFIX = "iris-workbench-hang"
CELL_PREFIX = "<iris-cell-"  # how cell source is registered (workbench.cluster.cell_filename)
REQUEST = b"where\n"
ANSWER_SWITCH_INTERVAL = 0.0001  # seconds: Python's switch interval while answering (_lock_handed_over_often)
# The GPU's small allocations (flags, counters, locks) are copied to the host; larger ones are data.
FLAG_BYTES = 4096
FLAG_ALLOCATIONS = 16
GPU_READ_SECONDS = 1.0
_ALIGN = 16
# At exit, how long the engine waits for its answering thread to finish the torch call in hand (see _quiesce).
QUIESCE_SECONDS = 3.0

_cell: str | None = None  # filename of the cell the main thread runs, None between cells


@contextlib.contextmanager
def running_cell(filename: str):
    """Mark the main thread as running the cell registered as ``filename`` (:func:`workbench.engine.run_cell`)."""
    global _cell
    _cell = filename
    try:
        yield
    finally:
        _cell = None


def address(channel: str, rank: int) -> str:
    """The abstract socket name of ``rank``'s answering thread (a leading NUL: no file in the filesystem)."""
    return f"\0{channel}-r{rank}"


def available() -> bool:
    """Abstract AF_UNIX sockets exist on Linux only; elsewhere the hang report says it cannot ask."""
    return sys.platform.startswith("linux")


# -- the answering thread (engine side) ------------------------------------------------------------------

def start(channel: str, rank: int, ctx, namespace: dict) -> Whereabouts:
    """Start answering where this engine's main thread is; call it on the main thread, at engine set-up."""
    whereabouts = Whereabouts(rank, ctx, namespace, threading.main_thread().ident)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address(channel, rank))
    listener.listen(8)
    _quiesce_at_exit()
    threading.Thread(target=_serve, args=(listener, whereabouts), name="iris-hang-report", daemon=True).start()
    return whereabouts


# The answering thread is a daemon, and it calls into torch (its warm-up; an answer locates a heap address).
# torch's bindings let go of Python's lock during a call and take it back after; a daemon thread that takes it
# back while the interpreter finalizes is ended there by pthread_exit, whose unwinding through torch's C++ frames
# (noexcept) calls std::terminate: "terminate called without an active exception", SIGABRT, an engine that
# was asked to stop ends as if it had crashed. Under load the warm-up (0.3 s on a quiet machine) was still
# running when a third of the engines of the cluster stress test exited, and 2 of 5 CI runs had a rank abort.
# So the thread works only while holding _busy, and the engine's exit takes _busy (and keeps it) before the
# interpreter finalizes: the thread is then blocked in accept() or in acquiring _busy, C code that ends quietly.
_busy = threading.Lock()
_closing = threading.Event()  # set at exit: the answering thread starts no more torch work
_quiesce_registered = False


def _quiesce_at_exit() -> None:
    global _quiesce_registered
    if not _quiesce_registered:
        # Registered after the host group's destroy (HostGroup.join, earlier in the engine's set-up), so it runs
        # before it: atexit runs the last registered first.
        atexit.register(_quiesce)
        _quiesce_registered = True


def _quiesce(seconds: float = QUIESCE_SECONDS) -> bool:
    """At exit: wait up to ``seconds`` for the answering thread to finish the torch call in hand, and keep it from
    starting another. False (said on stderr, the engine's log) when it was still busy: the exit goes on."""
    _closing.set()
    if _busy.acquire(timeout=seconds):
        return True  # never released: no answering thread calls into torch again
    print(f"workbench: the hang report's thread was still busy {seconds:g} s after the engine began to exit; "
          "exiting all the same", file=sys.stderr, flush=True)
    return False


def _warm_up() -> None:
    """Import and compute ahead what an answer needs: a hung kernel's rank, busy in the interpreter, gives the
    answering thread little time (it shares the interpreter lock), and the notebook waits only seconds.
    ``torch.unravel_index`` (which ``heap.locate`` calls) takes 0.4 s the first time."""
    import torch

    from .widgets import probes  # noqa: F401  (the variable names)

    if _closing.is_set():  # the engine is exiting: nothing to prepare for
        return
    torch.unravel_index(torch.tensor(0), (1,))
    _is_user("/")
    _in_triton("/")


@contextlib.contextmanager
def _lock_handed_over_often():
    """While this thread works, let the main thread hand Python's lock over 50 times as often.

    A hung kernel's main thread, busy in the interpreter, keeps the lock for a whole switch interval (5 ms)
    each time this thread waits for it, and an answer (or the warm-up before the first one) waits for it
    hundreds of times: each torch call lets go of it. On a loaded 2-core machine that took more than the 3 s
    the notebook waits."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(ANSWER_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _serve(listener: socket.socket, whereabouts: Whereabouts) -> None:
    # Here, not in start(): the engine's set-up need not wait (a question waits in the backlog). A cell that
    # hangs at once competes with the warm-up for the lock, as with an answer.
    with _busy:
        if not _closing.is_set():
            with _lock_handed_over_often():
                _warm_up()
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:  # e.g. out of file descriptors for a moment: keep answering later questions
            time.sleep(0.1)
            continue
        with connection:
            try:
                _answer(connection, whereabouts)
            except OSError:
                pass  # the asker gave up (its deadline passed): nothing to tell anyone


def _answer(connection: socket.socket, whereabouts: Whereabouts) -> None:
    # The socket has no file permissions: only this user's processes get an answer.
    _, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid():
        return
    connection.settimeout(2.0)
    if connection.recv(len(REQUEST)) != REQUEST:
        return
    with _busy, _lock_handed_over_often():
        try:
            if _closing.is_set():
                answer = {"rank": whereabouts.rank, "state": "unknown", "detail": "the engine is exiting"}
            else:
                answer = whereabouts.where()
        except Exception as exc:  # a bug here must not end the thread: say it instead
            answer = {"rank": whereabouts.rank, "state": "unknown", "detail": f"{type(exc).__name__}: {exc}"}
    connection.sendall(json.dumps(answer, default=str).encode())


def ask(channel: str, rank: int, timeout: float) -> dict:
    """``rank``'s answer (see :meth:`Whereabouts.where`); ``OSError``/``TimeoutError``/``ValueError`` if none."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(address(channel, rank))
        connection.sendall(REQUEST)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return json.loads(b"".join(chunks))


class Whereabouts:
    """What the answering thread knows: the rank, its context, namespace, main thread and watchers."""

    def __init__(self, rank: int, ctx, namespace: dict, main_ident: int):
        self.rank, self.ctx, self.namespace, self.main_ident = rank, ctx, namespace, main_ident
        self.kernels = KernelWatch(ctx.heap.bases, ctx.heap.size) if ctx.backend == "cpu" else None
        self.gpu = GpuWatch(ctx, namespace) if ctx.backend == "cuda" else None
        if self.kernels is not None:
            from iris.interpret import access_events

            access_events.add_observer(self.kernels)

    def where(self) -> dict:
        """Where the main thread is now, as a dict (every key optional but ``rank`` and ``state``).

        ``state`` is ``idle`` (no cell running), ``host`` (host code), ``kernel`` (in a kernel), ``polling``
        (in a kernel, on a ``while`` loop's condition); then ``line`` / ``source`` (the cell's line and its
        text), ``inside`` (the library the host code is in), ``kernel``, ``function``, ``kernel_line``,
        ``kernel_source``, ``program``, ``access`` (kind, location, heap_rank, value of the last load or
        atomic), ``awaits`` (e.g. ``"1"``, ``"!= 0"``), and on GPUs ``kernel_running``, ``flags``.
        """
        cell = _cell
        frame = sys._current_frames().get(self.main_ident)
        answer = {"rank": self.rank, "backend": self.ctx.backend}
        if cell is None or frame is None:
            return {**answer, "state": "idle"}
        stack = _stack(frame)
        launch = next((i for i, f in enumerate(stack) if _in_triton(f.f_code.co_filename)), len(stack))
        host, device = stack[:launch], stack[launch:]
        answer.update({"state": "host", **_host_place(host, cell)})
        if self.kernels is not None:
            answer.update(self._cpu_kernel(device))
        elif self.gpu is not None:
            answer.update(self.gpu.state())
        return answer

    def _cpu_kernel(self, device: list) -> dict:
        state = self.kernels.state(self.main_ident)
        if state is None or state.kernel is None:
            return {}
        program = None if state.program is None else [int(i) for i in state.program]
        found = {"state": "kernel", "kernel": state.kernel, "program": program}
        frame = _kernel_frame(device)
        if frame is not None:
            found.update(function=frame.f_code.co_name, kernel_line=_line_name(frame.f_code.co_filename,
                                                                                frame.f_lineno))
        access = self._access(state)
        if access is not None:
            found["access"] = access
        if frame is not None:
            loop = _polling_loop(frame)
            found["kernel_source"] = loop["source"] if loop else _source_line(frame.f_code.co_filename,
                                                                                frame.f_lineno)
            if loop is not None:
                found["state"] = "polling"
                found["kernel_line"] = _line_name(frame.f_code.co_filename, loop["line"])
                if loop.get("awaits") is not None:
                    found["awaits"] = loop["awaits"]
        return found

    def _access(self, state) -> dict | None:
        """The last load or atomic's first active lane: kind, where (named after a variable), value now."""
        if state.last is None:
            return None
        kind, addresses, mask, itemsize = state.last
        lanes = mask.nonzero()[0]
        if lanes.size == 0:
            return None
        address = int(addresses[lanes[0]])
        found = {"kind": kind, "address": hex(address), "lanes": int(lanes.size)}
        heap = self.ctx.heap
        where = heap.locate(address)
        if where is None:
            return {**found, "location": f"{address:#x} (not on the heap)"}
        names = _names_now(self.namespace, self.ctx)
        found.update(location=where.named(", ".join(names.get(where.allocation_offset, [])) or None),
                     heap_rank=where.rank, value=_read(heap, where, itemsize))
        return found


def _names_now(namespace: dict, ctx) -> dict[int, list[str]]:
    """The names the heap inspector shows (:func:`workbench.widgets.probes.variable_names`), read from this
    thread while the main thread may be binding names."""
    from .widgets.probes import variable_names as names

    for _ in range(3):  # the main thread may bind a name meanwhile (host code)
        with contextlib.suppress(RuntimeError):
            return names(namespace, ctx)
    return {}


def _read(heap, where, itemsize: int):
    """The value at ``where`` now, as the allocation's dtype when the access was that wide, else an int."""
    import torch

    raw, _ = heap.memory.view(where.rank, where.offset, itemsize)
    dtype = where.allocation.dtype if where.allocation is not None else None
    if dtype is None or dtype.itemsize != itemsize:
        dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(itemsize, torch.uint8)
    return _plain(raw.view(dtype)[0].item())


def _plain(value):
    return int(value) if isinstance(value, bool) else value


# -- the stack -------------------------------------------------------------------------------------------

def _stack(frame) -> list:
    """Frames from the outermost to ``frame``."""
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames[::-1]


def _library_roots() -> tuple[str, ...]:
    import iris

    here = os.path.dirname(os.path.abspath(__file__))
    paths = sysconfig.get_paths()
    roots = {os.path.dirname(os.path.abspath(iris.__file__)), here}
    roots.update(os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    return tuple(root.rstrip("/") + "/" for root in roots)


_LIBRARIES: tuple[str, ...] | None = None
_TRITON: str | None = None


def _in_triton(filename: str) -> bool:
    global _TRITON
    if _TRITON is None:
        import triton

        _TRITON = os.path.dirname(os.path.abspath(triton.__file__)) + "/"
    return filename.startswith(_TRITON)


def _is_user(filename: str) -> bool:
    """Code the user wrote: a cell, or a file outside iris, the workbench, the stdlib and installed packages."""
    global _LIBRARIES
    if filename.startswith(CELL_PREFIX):
        return True
    if filename.startswith("<"):
        return False
    if _LIBRARIES is None:
        _LIBRARIES = _library_roots()
    return not os.path.abspath(filename).startswith(_LIBRARIES)


def _host_place(host: list, cell: str) -> dict:
    """The cell's line (the innermost frame in the cell) and the library the main thread is in, if any."""
    in_cell = [f for f in host if f.f_code.co_filename == cell]
    if not in_cell:
        return {}
    frame = in_cell[-1]
    place = {"line": _line_name(cell, frame.f_lineno), "source": _source_line(cell, frame.f_lineno)}
    innermost = host[-1]
    if innermost is not frame and not _is_user(innermost.f_code.co_filename):
        place["inside"] = library_name(innermost.f_code.co_filename)
    return place


def _kernel_frame(device: list):
    """The innermost frame of user kernel code (a device function the kernel called included), else None."""
    return next((f for f in reversed(device) if _is_user(f.f_code.co_filename)), None)


def _line_name(filename: str, line: int) -> str:
    if filename.startswith(CELL_PREFIX):
        return f"cell line {line}"
    return f"{os.path.basename(filename)}:{line}"


def _source_line(filename: str, line: int) -> str:
    return linecache.getline(filename, line).strip()


# -- the loop condition ----------------------------------------------------------------------------------

_NEGATED = {ast.NotEq: "==", ast.Eq: "!=", ast.Lt: ">=", ast.LtE: ">", ast.Gt: "<=", ast.GtE: "<"}
_MIRRORED = {"==": "==", "!=": "!=", ">=": "<=", ">": "<", "<=": ">=", "<": ">"}


def _polling_loop(frame) -> dict | None:
    """The ``while`` loop ``frame`` polls in: its ``line``, ``source`` (header) and ``awaits``; None if the
    current line is neither that loop's condition nor an assignment of the name the condition compares."""
    tree, lines = _function_tree(frame)
    if tree is None:
        return None
    line = frame.f_lineno
    for loop in sorted((n for n in ast.walk(tree) if isinstance(n, ast.While)), key=lambda n: -n.lineno):
        test = loop.test
        on_test = test.lineno <= line <= test.end_lineno
        assigned = not on_test and loop.lineno < line <= loop.end_lineno and _assigns_compared(loop, line)
        if on_test or assigned:
            header = " ".join(lines[i - 1].strip() for i in range(loop.lineno, test.end_lineno + 1))
            return {"line": loop.lineno, "source": header, "awaits": awaited_value(test, frame)}
    return None


def _function_tree(frame):
    """The AST of the function ``frame`` runs, at the file's line numbers, and the file's lines."""
    lines = linecache.getlines(frame.f_code.co_filename)
    first = frame.f_code.co_firstlineno
    if not lines or first > len(lines):
        return None, lines
    try:
        block = inspect.getblock(lines[first - 1:])
        tree = ast.parse(textwrap.dedent("".join(block)))
    except (SyntaxError, IndentationError, TokenError):
        return None, lines
    ast.increment_lineno(tree, first - 1)
    return tree, lines


def _assigns_compared(loop: ast.While, line: int) -> bool:
    """True if a statement of ``loop``'s body on ``line`` assigns a name that the loop's condition compares."""
    test = loop.test
    if not isinstance(test, ast.Compare):
        return False
    compared = {n.id for n in (test.left, *test.comparators) if isinstance(n, ast.Name)}
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.lineno <= line <= node.end_lineno:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in compared for t in targets):
                return True
    return False


def awaited_value(test: ast.expr, frame=None) -> str | None:
    """What ends a ``while`` loop with condition ``test``: ``"1"`` for ``x != 1``, ``"!= 0"`` for ``x == 0``,
    ``">= 4"`` for ``x < 4``; None when the condition is not one comparison with a known constant side.

    The constant side is a literal, or a name whose value in ``frame``'s locals (then globals) is a number,
    a ``tl.constexpr`` or a one-element interpreter tensor; nothing is ever evaluated.

    Examples
    --------
    >>> awaited_value(ast.parse("x != 1", mode="eval").body)
    '1'
    >>> awaited_value(ast.parse("READY > load(p)", mode="eval").body, None) is None   # READY unknown
    True
    """
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or type(test.ops[0]) not in _NEGATED:
        return None
    ending = _NEGATED[type(test.ops[0])]
    left, right = test.left, test.comparators[0]
    value = _constant(right, frame)
    if value is None:  # written the other way round: 1 != load(p)
        value, ending = _constant(left, frame), _MIRRORED[ending]
    if value is None:
        return None
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if ending == "==" else f"{ending} {text}"


def _constant(node: ast.expr, frame):
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        value = None
        if isinstance(node, ast.Name) and frame is not None:
            found = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
            value = _scalar(found)
    return _plain(value) if isinstance(value, int | float) else None


def _scalar(value):
    """A Python number from a number, a ``tl.constexpr`` or a one-element interpreter tensor; else None."""
    import numpy as np
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if isinstance(value, tl.tensor):
        data = getattr(value.handle, "data", None)
        value = data.reshape(-1)[0].item() if isinstance(data, np.ndarray) and data.size == 1 else None
    return value if isinstance(value, int | float) else None


# -- what kernels do (CPU interpreter) -------------------------------------------------------------------

class _ThreadState:
    __slots__ = ("kernel", "program", "last")

    def __init__(self):
        # last: (kind, addresses, mask, itemsize), replaced whole so that a reader never mixes two accesses
        self.kernel = self.program = self.last = None


class KernelWatch:
    """An observer (:mod:`iris.interpret.access_events`) keeping, per thread, the launched kernel, the program
    and the last load or atomic on a heap: a reference to the interpreter's address and mask arrays, no
    per-element work (the lane is picked only when a report asks).

    Only accesses whose first lane falls in a heap count: a polling loop also loads kernel arguments such as
    the heap bases (``DeviceContext`` does at every call), which would otherwise hide the polled flag.

    Examples
    --------
    >>> watch = KernelWatch(ctx.heap.bases, ctx.heap.size)                 # doctest: +SKIP
    >>> access_events.add_observer(watch)                                   # doctest: +SKIP
    >>> watch.state(threading.main_thread().ident).kernel                   # doctest: +SKIP
    'wait_for_flag'
    """

    def __init__(self, bases, size: int):
        self._threads: dict[int, _ThreadState] = {}
        self._bases = sorted(int(b) for b in bases)
        self._size = int(size)

    def _on_heap(self, addresses) -> bool:
        if addresses.size == 0:
            return False
        address = int(addresses[0])
        i = bisect.bisect_right(self._bases, address) - 1
        return i >= 0 and address - self._bases[i] < self._size

    def state(self, ident: int) -> _ThreadState | None:
        return self._threads.get(ident)

    def _mine(self) -> _ThreadState:
        ident = threading.get_ident()
        state = self._threads.get(ident)
        if state is None:
            state = self._threads[ident] = _ThreadState()
        return state

    def launch_started(self, kernel: str) -> None:
        state = self._mine()
        state.kernel, state.program, state.last = kernel, None, None

    def launch_finished(self) -> None:
        state = self._mine()
        state.kernel, state.last = None, None

    def program_started(self, program_id, grid) -> None:
        self._mine().program = program_id  # (x, y, z) ints: made JSON-able by the report, not per program

    def access(self, kind: str, addresses, mask, itemsize: int) -> None:
        if kind == "load" and self._on_heap(addresses):
            self._mine().last = (kind, addresses, mask, itemsize)

    def atomic(self, kind: str, addresses, mask, itemsize: int, sem: str, perform):
        if self._on_heap(addresses):
            self._mine().last = (kind, addresses, mask, itemsize)
        return perform()[0]


# -- what a GPU rank does --------------------------------------------------------------------------------

class GpuWatch:
    """The last kernel this rank launched (Triton's launch hook, chained to any other) and, on request, whether
    its stream is still busy and the values of the heap's small allocations, read on a stream of its own so
    that a hung kernel cannot hang the report (a copy not done within :data:`GPU_READ_SECONDS` is said so).

    Examples
    --------
    >>> GpuWatch(ctx, namespace).state()["flags"]                                     # doctest: +SKIP
    [{'name': 'flags', 'dtype': 'int32', 'values': [0, 0, 0, 0]}]
    """

    def __init__(self, ctx, namespace: dict):
        import torch
        from triton import knobs

        self.ctx, self.namespace = ctx, namespace
        self.last: tuple | None = None  # (kernel name, stream handle, time.monotonic() of the launch)
        hooks = knobs.runtime.launch_enter_hook
        if hasattr(hooks, "add"):  # triton >= 3.5: a HookChain
            hooks.add(self._launched)
        else:  # an older triton's single callable (or None): call it too
            previous = hooks

            def chained(metadata):
                if previous is not None:
                    previous(metadata)
                self._launched(metadata)

            knobs.runtime.launch_enter_hook = chained
        # Made now, not when a kernel hangs: creating streams and pinned memory then could wait on the device.
        self.stream = torch.cuda.Stream(device=ctx.device)
        self.staging = torch.empty((FLAG_BYTES + _ALIGN) * FLAG_ALLOCATIONS, dtype=torch.uint8, pin_memory=True)
        self.copied = torch.cuda.Event()
        self.reading = threading.Lock()

    def _launched(self, metadata) -> None:
        data = getattr(metadata, "data", None) or {}  # LazyDict: .data without running user metadata hooks
        self.last = (data.get("name"), data.get("stream"), time.monotonic())

    def state(self) -> dict:
        found = {}
        if self.last is not None:
            name, stream, when = self.last
            found.update(kernel=name, launched_seconds_ago=round(time.monotonic() - when, 3))
            running = self._bounded(lambda: self._stream_busy(stream), "the stream's state", 0.5)
            if isinstance(running, bool):
                found["kernel_running"] = running
                if running:
                    found["state"] = "kernel"
        found["flags"] = self._bounded(self._read_flags, "the heap's small allocations", GPU_READ_SECONDS + 0.5)
        return found

    def _stream_busy(self, stream) -> bool:
        import torch

        if not stream:  # the legacy default stream (handle 0)
            return not torch.cuda.default_stream(self.ctx.device).query()
        return not torch.cuda.ExternalStream(int(stream), device=self.ctx.device).query()

    @staticmethod
    def _bounded(work, what: str, seconds: float):
        """``work()`` in a helper thread, given ``seconds``: a CUDA call that blocks (a device busy with a hung
        kernel may make one wait) must not keep the report from the notebook. A message if it took longer."""
        result = []
        helper = threading.Thread(target=lambda: result.append(_guarded(work)), name="iris-hang-report-gpu",
                                  daemon=True)
        helper.start()
        helper.join(seconds)
        if not result:
            return f"could not read {what} within {seconds:g} s (the device did not answer)"
        return result[0]

    def _read_flags(self):
        import torch

        if not self.reading.acquire(blocking=False):
            return "an earlier read of the flags is still waiting for the device"
        try:
            chosen = _small_allocations(self.ctx.heap.allocations())
            names = _names_now(self.namespace, self.ctx)
            spans, start = [], 0
            with torch.cuda.stream(self.stream):
                for a in chosen:
                    raw, _ = self.ctx.heap.memory.view(self.ctx.heap.rank, a.offset, a.nbytes)
                    self.staging[start:start + a.nbytes].copy_(raw, non_blocking=True)
                    spans.append((a, start))
                    start += -(-a.nbytes // _ALIGN) * _ALIGN  # each copy aligned for its dtype's view
                self.copied.record(self.stream)
            deadline = time.monotonic() + GPU_READ_SECONDS
            while not self.copied.query():
                if time.monotonic() > deadline:
                    return f"the copy of the flags did not finish within {GPU_READ_SECONDS:g} s"
                time.sleep(0.002)
            return [{"name": ", ".join(names.get(a.offset, [])) or a.label or f"alloc@{a.offset:#x}",
                     "dtype": str(a.dtype).removeprefix("torch."),
                     "values": self.staging[s:s + a.nbytes].view(a.dtype).tolist()} for a, s in spans]
        finally:
            self.reading.release()


def _guarded(work):
    try:
        return work()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _small_allocations(allocations) -> list:
    """Up to :data:`FLAG_ALLOCATIONS` allocations of at most :data:`FLAG_BYTES`, integer dtypes first."""
    small = [a for a in allocations if 0 < a.nbytes <= FLAG_BYTES]
    small.sort(key=lambda a: (a.dtype.is_floating_point or a.dtype.is_complex, a.offset))
    return small[:FLAG_ALLOCATIONS]


def library_name(filename: str) -> str:
    """The top-level package of a file: ``.../site-packages/triton/runtime/interpreter.py`` -> ``triton``."""
    for root in sorted(filter(None, sys.path), key=len, reverse=True):
        root = root.rstrip("/") + "/"
        if filename.startswith(root):
            return filename[len(root):].split("/")[0].removesuffix(".py")
    return os.path.basename(filename)
