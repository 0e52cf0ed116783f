"""A rank's side of a stepped run: pause before every access to a symmetric heap until the coordinator says go.

The CPU backend runs each rank's kernels in the rank's own process through Triton's interpreter, which hears of
every load, store and atomic before it happens (:mod:`iris.interpret.access_events`). The gate is such an observer.
Before an access that touches any rank's heap (this rank's own included: a flag polled here is set from elsewhere)
it tells the coordinator what is about to happen (the kernel and its line, the program, the operation, whose heap
and which elements, the values it will write or compare, the values there now, and the named operation it runs in:
``within``, a collective of a training step, :mod:`iris.instruments.operations`) and waits for ``go``; once done it
says what the elements held just before the access and what they hold after it. A host barrier (``ctx.barrier()``)
is a step too; the end of the cell is said with ``finished``. A thread answers the coordinator's ``read`` requests
(bytes of any heap: every rank maps every heap of its host) whatever the rank is doing, so the heaps can be drawn
between steps.

Examples
--------
>>> with stepped(ctx, "/tmp/iris-step-x/coordinator-1f2e3d4c5b6a"):       # doctest: +SKIP
...     put_to_next[(1,)](data, ctx.cur_rank, ctx.num_ranks, ctx.get_heap_bases())
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import linecache
import os
import queue
import socket
import threading

import numpy as np

from ...interpret import access_events
from .. import operations
from .protocol import IDLE_SECONDS, Channel, SteppingStopped

ON_A_GPU = ("a kernel on a GPU cannot be paused between ranks, so it cannot be stepped: run the same code on CPU "
            "ranks (%iris start --backend cpu, or IRIS_BACKEND=cpu for a script), where every access can be stepped, "
            "or trace it on the GPU and read the timeline (%%iris_kernel --trace)")
VALUES_SHOWN = 8  # values of an operation's first lanes that the transcript shows
_LIBRARY = (os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep,
            *access_events.NOT_KERNEL_SOURCE)
_NUMPY = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16, "int1": np.bool_, "int8": np.int8,
          "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16,
          "uint32": np.uint32, "uint64": np.uint64}
_SHORT_MODULES = {"iris.language.core": "iris"}


class Gate:
    """The observer that pauses this rank (see the module docstring); made and removed by :func:`stepped`.

    Parameters
    ----------
    heap : iris.heap.SymmetricHeap
        This rank's heap (it maps every rank's heap of its host).
    rank : int
        This rank.
    address : str
        The coordinator's socket (a path in a folder only its user can open).
    namer : callable, optional
        ``namer(allocation_offset) -> str or None``: what to call an allocation (the workbench names it after the
        rank's variables); the allocation's label otherwise.
    idle_timeout : float, optional
        Seconds a paused rank waits for its next step before :class:`SteppingStopped` (default
        ``IRIS_STEP_IDLE_SECONDS``, else :data:`~.protocol.IDLE_SECONDS`).
    """

    def __init__(self, heap, rank: int, address: str, namer=None, idle_timeout: float | None = None):
        if idle_timeout is None:
            idle_timeout = float(os.environ.get("IRIS_STEP_IDLE_SECONDS", IDLE_SECONDS))
        self.heap, self.rank, self.namer, self.idle_timeout = heap, rank, namer, idle_timeout
        self.steps = 0
        self.kernel, self.program = "?", (0, 0, 0)
        bases = np.array([b or 0 for b in heap.bases], dtype=np.uint64)
        self._order = np.argsort(bases)
        self._sorted_bases = bases[self._order]
        self._pending = None  # (addresses, dtype) of the access let go, whose values are reported after it
        self._commands: queue.Queue = queue.Queue()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
        self.channel = Channel(sock)
        self.channel.send({"hello": {"rank": rank, "pid": os.getpid()}})
        self._reader = threading.Thread(target=self._serve, name=f"iris-step-gate-r{rank}", daemon=True)
        self._reader.start()

    # -- the interpreter's observer ----------------------------------------------------------------------------
    def launch_started(self, kernel: str) -> None:
        self.kernel = kernel

    def launch_finished(self) -> None:
        pass

    def program_started(self, program_id, grid) -> None:
        self.program = tuple(int(i) for i in program_id)

    def before_access(self, kind, addresses, mask, itemsize, dtype, operands) -> None:
        lanes = np.flatnonzero(mask)
        targets = self._targets(addresses[lanes], itemsize)
        if not targets:
            return  # not a heap: nothing another rank can see
        frame = access_events.access_frame()
        within = operations.current()
        # Inside a named operation (a collective that torch.distributed called) the frame outside iris is torch's
        # own code; the line that makes the access is the collective's kernel, so that is the line shown.
        user = access_events.kernel_frame(frame) if within is not None else _user_frame(frame)
        operation = {
            "step": self.steps, "rank": self.rank, "kind": kind, "label": _label(frame, user, kind),
            "kernel": self.kernel,
            "file": user.f_code.co_filename if user else "?", "line": user.f_lineno if user else 0,
            "program": list(self.program), "targets": targets, "lanes": int(lanes.size), "dtype": dtype,
            "before": _values(addresses[lanes[:VALUES_SHOWN]], itemsize, dtype),
        }
        operation["source"] = linecache.getline(operation["file"], operation["line"]).strip()
        if within is not None:
            operation["within"], operation["within_number"] = within.label, within.number
        for name, values in operands.items():
            shown = values[lanes[:VALUES_SHOWN]] if values.size == mask.size else values[:VALUES_SHOWN]
            operation[name] = _as_numbers(shown, dtype)
        self._pause({"paused": operation})
        shown = addresses[lanes[:VALUES_SHOWN]]
        # Read once let go, not when paused: the other ranks' steps in between may have changed them.
        self._pending = (shown, itemsize, dtype, _values(shown, itemsize, dtype))

    def access(self, kind, addresses, mask, itemsize) -> None:
        self._done()

    def atomic(self, kind, addresses, mask, itemsize, sem, perform):
        result, _ = perform()
        self._done()
        return result

    # -- host side -----------------------------------------------------------------------------------------
    def at_host_barrier(self) -> None:
        """Called by ``ctx.barrier()`` before it waits for the other ranks: a step of its own."""
        user = _user_frame(__import__("sys")._getframe(1))
        where = {"file": user.f_code.co_filename, "line": user.f_lineno} if user else {"file": "?", "line": 0}
        where["source"] = linecache.getline(where["file"], where["line"]).strip()
        self._pause({"barrier": {"step": self.steps, "rank": self.rank, **where}})
        self.channel.send({"entered": {"rank": self.rank}})
        # The coordinator releases the barrier once every rank has entered it; only then does this rank go into the
        # real one (gloo's, which no signal interrupts), so a run stopped meanwhile leaves no rank stuck there.
        self._wait("released")

    def finished(self, error: BaseException | None = None) -> None:
        """Say that this rank's cell ended (with ``error``, when it failed)."""
        message = {"rank": self.rank, "steps": self.steps}
        if error is None:
            self.channel.send({"finished": message})
        else:
            self.channel.send({"failed": {**message, "error": f"{type(error).__name__}: {error}"}})

    def close(self) -> None:
        self.channel.close()

    # -- inside ------------------------------------------------------------------------------------------------
    def _allocations(self) -> list[dict]:
        """This rank's live allocations (each rank's heap has the same), named as every report names them."""
        found = []
        for a in self.heap.allocations():
            name = a.label or (self.namer and self.namer(a.offset)) or f"alloc@{a.offset:#x}"
            found.append({"name": name, "offset": int(a.offset), "nbytes": int(a.nbytes), "shape": list(a.shape),
                          "dtype": str(a.dtype).replace("torch.", "")})
        return found

    def _pause(self, message: dict) -> None:
        next(iter(message.values()))["allocations"] = self._allocations()
        self.channel.send(message)
        self._wait("go")
        self.steps += 1

    def _wait(self, word: str) -> None:
        """Wait for the coordinator's ``word``; a stop (or none for :attr:`idle_timeout` s) ends the kernel here."""
        try:
            command = self._commands.get(timeout=self.idle_timeout)
        except queue.Empty:
            raise SteppingStopped(f"rank {self.rank}: no step came for {self.idle_timeout:g} s, so this stepped run "
                                  "was stopped (nothing is left paused)") from None
        if "stop" in command:
            raise SteppingStopped(f"rank {self.rank}: the stepped run was stopped: {command['stop']}")
        if word not in command:
            raise SteppingStopped(f"rank {self.rank}: the coordinator said {command!r} where {word!r} was due")

    def _done(self) -> None:
        if self._pending is not None:
            addresses, itemsize, dtype, before = self._pending
            self._pending = None
            self.channel.send({"done": {"rank": self.rank, "before": before,
                                        "after": _values(addresses, itemsize, dtype)}})

    def _serve(self) -> None:
        """Hand ``go``/``stop`` to the paused kernel; answer ``read`` at once; a closed coordinator stops the run."""
        while True:
            message = self.channel.receive()
            if message is None:
                self._commands.put({"stop": "the coordinator is gone"})
                return
            if "read" in message:
                want = message["read"]
                base = self.heap.bases[want["rank"]]
                data = ctypes.string_at(base + want["offset"], want["nbytes"]) if base else b""
                self.channel.send({"bytes": base64.b64encode(data).decode(), "id": want.get("id")})
            else:
                self._commands.put(message)

    def _targets(self, addresses, itemsize: int) -> list[dict]:
        """Whose heaps ``addresses`` fall in, each as ``{"rank", "name", "offset", "shape", "dtype", "first",
        "count"}`` (the allocation and the first element touched); empty when none is in a heap."""
        if addresses.size == 0:
            return []
        index = np.searchsorted(self._sorted_bases, addresses, side="right") - 1
        offsets = addresses - self._sorted_bases[np.maximum(index, 0)]
        inside = (index >= 0) & (offsets < self.heap.size) & (self._sorted_bases[np.maximum(index, 0)] > 0)
        targets = []
        for position in np.unique(index[inside]):
            chosen = inside & (index == position)
            heap_rank = int(self._order[position])
            first = int(addresses[chosen][0])
            where = self.heap.locate(first)
            allocation = where.allocation if where is not None else None
            # The one naming rule of every report (HeapLocation.named): the allocation's label, else the variables
            # holding it, else its offset.
            name = None if allocation is None else allocation.label or (self.namer and self.namer(allocation.offset))
            target = {"rank": heap_rank, "count": int(chosen.sum()), "offset": int(offsets[chosen].min()),
                      "nbytes": int(offsets[chosen].max() - offsets[chosen].min()) + itemsize}
            if allocation is not None:
                target.update(name=name or where.allocation_name, allocation=int(allocation.offset),
                              shape=list(allocation.shape), dtype=str(allocation.dtype).replace("torch.", ""),
                              first=list(where.element or ()))
            else:
                target.update(name=f"heap+{target['offset']:#x}")
            targets.append(target)
        return targets


@contextlib.contextmanager
def stepped(ctx, address: str, namer=None, idle_timeout: float | None = None):
    """Run the body with this rank's heap accesses paused, one step at a time, by the coordinator at ``address``.

    Only the CPU backend can pause a kernel between its accesses: on a GPU a kernel runs to its end once launched.

    Raises
    ------
    NotImplementedError
        On the cuda backend, saying what can be done instead.
    """
    if ctx.backend != "cpu":
        raise NotImplementedError(f"rank {ctx.cur_rank}: {ON_A_GPU}")
    gate = Gate(ctx.heap, ctx.cur_rank, address, namer=namer, idle_timeout=idle_timeout)
    ctx._step_gate = gate
    access_events.add_observer(gate)
    try:
        yield gate
    except BaseException as exc:
        with contextlib.suppress(OSError):
            gate.finished(exc)
        raise
    else:
        gate.finished()
    finally:
        access_events.remove_observer(gate)
        ctx._step_gate = None
        gate.close()


def _user_frame(frame):
    """The innermost frame outside iris and Triton (the line of the user's kernel or cell), None if none."""
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY):
        frame = frame.f_back
    return frame


def _label(frame, user, kind: str) -> str:
    """What the user's line called to make the access: ``iris.store``, ``iris.flags.wait``..., or, for Triton's own
    operations (the interpreter's wrappers stand between), ``tl.`` and the kind: ``tl.load``, ``tl.atomic_cas``."""
    chain = []
    while frame is not None and frame is not user:
        chain.append(frame)
        frame = frame.f_back
    for inner in reversed(chain):  # from the user's line inwards: the first function of iris's device API
        module = inner.f_globals.get("__name__", "")
        if module.startswith("iris.language"):
            return f"{_SHORT_MODULES.get(module, module.replace('iris.language.', 'iris.'))}.{inner.f_code.co_name}"
    return f"tl.{kind}"


def _values(addresses, itemsize: int, dtype: str) -> list:
    """The values at ``addresses`` now, as numbers."""
    raw = b"".join(ctypes.string_at(int(a), itemsize) for a in addresses)
    if dtype == "bf16":
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).tolist()
    numpy_type = _NUMPY.get(dtype)
    if numpy_type is None or np.dtype(numpy_type).itemsize != itemsize:
        return [raw[i:i + itemsize].hex() for i in range(0, len(raw), itemsize)]
    return np.frombuffer(raw, dtype=numpy_type).tolist()


def _as_numbers(values, dtype: str) -> list:
    """Operand values (the interpreter's numpy arrays; bf16 as its 16-bit patterns) as numbers."""
    values = np.asarray(values)
    if dtype == "bf16" and values.dtype == np.uint16:
        return (values.astype(np.uint32) << 16).view(np.float32).tolist()
    return values.tolist()
