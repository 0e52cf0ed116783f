"""Tell observers about every memory access, launch and program of interpreted kernels (for the race checker).

Why: a checker of memory ordering must see every load, store and atomic a kernel makes, whichever API made it
(``iris.load``, ``DeviceContext``, ``IrisDeviceCtx``, plain ``tl.load``/``gl.store`` on translated pointers),
and know which launch and which program made it. Everything reaches memory through the interpreter's builder
(``InterpreterBuilder.create_masked_load``/``create_masked_store``, which ``create_load``, block pointers and
tensor descriptors call too, ``create_atomic_rmw`` and ``create_atomic_cas`` in triton/runtime/interpreter.py),
programs start at ``InterpreterBuilder.set_grid_idx``, and launches run in ``GridExecutor.__call__``.

Fix: those methods are wrapped, once, when the first observer is added; with no observer they cost one list
check. Observers get numpy arrays and plain strings, never Triton objects, so that the checker (an iris
feature, :mod:`iris.instruments.checking`) knows nothing of Triton's internals. An observer is any object with:

* ``launch_started(kernel_name)`` and ``launch_finished()``: around every interpreted launch;
* ``program_started(program_id, grid)``: ``(x, y, z)`` and the launch's grid ``(nx, ny, nz)``, before each
  program of the launch runs;
* ``access(kind, addresses, mask, itemsize)``: after a load (``"load"``) or store (``"store"``);
  ``addresses`` is a flat uint64 array, ``mask`` a bool array of the same length;
* ``atomic(kind, addresses, mask, itemsize, sem, perform)``: ``kind`` such as ``"atomic_add"``, ``sem`` one of
  ``"relaxed"``, ``"acquire"``, ``"release"``, ``"acq_rel"``; it must call ``perform()`` exactly once, which
  runs the atomic and returns ``(result, wrote)`` (``wrote``: the lanes that modified memory: a compare-and-swap
  that failed did not), and return ``result``. Wrapping the real atomic lets the observer make the atomic and
  its own bookkeeping one indivisible step across processes.

An observer may also have ``before_access(kind, addresses, mask, itemsize, dtype, operands)``: called *before*
every load, store and atomic (the stepper pauses there, :mod:`iris.instruments.stepping`); ``dtype`` is Triton's
name of the element type (``"fp32"``, ``"bf16"``, ``"i32"``...), ``operands`` the values the access will write or
compare, flat numpy arrays by name (``"value"``; ``"compare"`` for a compare-and-swap), empty for a load.

While an observer is called, :func:`access_frame` is the frame that asked the builder for the access, and
:func:`kernel_frame` walks out from it to the kernel's own line (the observer's own caller may be another
observer's ``atomic``).

Examples
--------
>>> class Printer:
...     def launch_started(self, kernel): print("launch", kernel)
...     def launch_finished(self): pass
...     def program_started(self, program_id, grid): pass
...     def access(self, kind, addresses, mask, itemsize): print(kind, addresses[mask])
...     def atomic(self, kind, addresses, mask, itemsize, sem, perform): return perform()[0]
>>> add_observer(Printer())                    # doctest: +SKIP
"""

import functools
import os
import sys
import threading

import numpy as np
from triton._C.libtriton import ir
from triton.runtime import interpreter

from ..base.patching import replace_once

_observers = []
_before = []  # the observers that have before_access
_reporting = threading.local()  # .frame: the builder's caller, while observers hear of its access

_IRIS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Frames that are not the user's kernel source: Triton, the interpreter adapter, the instruments, and iris's device
# API (iris.store called from a kernel is reported at the kernel's line).
NOT_KERNEL_SOURCE = (
    os.path.dirname(os.path.abspath(__import__("triton").__file__)) + os.sep,
    os.path.join(_IRIS, "interpret") + os.sep,
    os.path.join(_IRIS, "instruments") + os.sep,
    os.path.join(_IRIS, "language", "core.py"),
    os.path.join(_IRIS, "language", "gluon.py"),
    os.path.join(_IRIS, "language", "tracing.py"),
    os.path.join(_IRIS, "language", "trace_events.py"),
)
_is_kernel_source: dict = {}  # code object -> whether its file is the user's kernel source (asked once per code)

SEMANTICS = {
    ir.MEM_SEMANTIC.RELAXED: "relaxed",
    ir.MEM_SEMANTIC.ACQUIRE: "acquire",
    ir.MEM_SEMANTIC.RELEASE: "release",
    ir.MEM_SEMANTIC.ACQUIRE_RELEASE: "acq_rel",
}

# The user-facing name of each read-modify-write (float add, unsigned min/max are Triton's lowerings).
RMW_KINDS = {
    ir.ATOMIC_OP.ADD: "atomic_add", ir.ATOMIC_OP.FADD: "atomic_add",
    ir.ATOMIC_OP.MIN: "atomic_min", ir.ATOMIC_OP.UMIN: "atomic_min",
    ir.ATOMIC_OP.MAX: "atomic_max", ir.ATOMIC_OP.UMAX: "atomic_max",
    ir.ATOMIC_OP.AND: "atomic_and", ir.ATOMIC_OP.OR: "atomic_or", ir.ATOMIC_OP.XOR: "atomic_xor",
    ir.ATOMIC_OP.XCHG: "atomic_xchg",
}


def add_observer(observer) -> None:
    """Report every later access, launch and program start to ``observer`` (see the module docstring)."""
    _install()
    if observer not in _observers:
        _observers.append(observer)
        if hasattr(observer, "before_access"):
            _before.append(observer)


def remove_observer(observer) -> None:
    """Stop reporting to ``observer``; nothing happens if it was not added."""
    if observer in _observers:
        _observers.remove(observer)
    if observer in _before:
        _before.remove(observer)


def kernel_frame(frame):
    """The innermost frame, from ``frame`` outwards, that is the user's kernel source (None if there is none):
    the line a report names for an access made through iris's device API or Triton's.

    Examples
    --------
    >>> where = kernel_frame(access_frame())            # in an observer       # doctest: +SKIP
    >>> where.f_code.co_filename, where.f_lineno        # doctest: +SKIP
    ('<iris-cell-0123abcd>', 7)
    """
    while frame is not None:
        code = frame.f_code
        is_source = _is_kernel_source.get(code)
        if is_source is None:
            is_source = _is_kernel_source[code] = not code.co_filename.startswith(NOT_KERNEL_SOURCE)
        if is_source:
            return frame
        frame = frame.f_back
    return None


def access_frame():
    """The frame that asked the interpreter's builder for the access being reported now (None outside a report).

    Returns
    -------
    frame or None
        Triton's semantic layer, usually; the kernel's own frame is further out (``f_back``).

    Examples
    --------
    >>> class Where:
    ...     def access(self, kind, addresses, mask, itemsize):
    ...         frame = access_frame()                         # walk out to the first frame of the kernel's file
    """
    return getattr(_reporting, "frame", None)


def _lanes(pointers, mask):
    """Flat addresses and the flat mask broadcast to them (a scalar mask such as ``get_int1(True)`` included)."""
    addresses = np.ascontiguousarray(pointers.data, dtype=np.uint64).reshape(-1)
    lanes = np.broadcast_to(np.asarray(mask.data, dtype=bool), pointers.data.shape).reshape(-1)
    return addresses, lanes


def _itemsize(pointers):
    return max(1, pointers.get_element_ty().primitive_bitwidth // 8)  # int1 is stored in a byte


def _dtype_name(pointers) -> str:
    return str(pointers.get_element_ty())


def _tell_before(kind: str, ptrs, lanes, operands: dict, frame) -> None:
    """Tell the observers that have ``before_access`` about an access about to happen to ``ptrs``' ``lanes``."""
    addresses = np.ascontiguousarray(ptrs.data, dtype=np.uint64).reshape(-1)
    values = {name: np.asarray(value.data).reshape(-1) for name, value in operands.items()}
    _reporting.frame = frame
    try:
        for observer in list(_before):
            observer.before_access(kind, addresses, lanes, _itemsize(ptrs), _dtype_name(ptrs), values)
    finally:
        _reporting.frame = None


def _tell_access(kind: str, ptrs, mask, frame) -> None:
    """Tell every observer about a plain load or store (nothing to do, and nothing computed, without one)."""
    if _observers:
        addresses, lanes = _lanes(ptrs, mask)
        _reporting.frame = frame
        try:
            for observer in list(_observers):
                observer.access(kind, addresses, lanes, _itemsize(ptrs))
        finally:
            _reporting.frame = None


# The cache options after the mask differ between releases (triton 3.6 to 3.8: cache_modifier, eviction_policy;
# 3.9: cache_policy), so they pass through untouched.
def _observed_load(create_masked_load):
    @functools.wraps(create_masked_load)
    def load(self, ptrs, mask, *options, **named_options):
        if _before:
            _tell_before("load", ptrs, _lanes(ptrs, mask)[1], {}, sys._getframe(1))
        result = create_masked_load(self, ptrs, mask, *options, **named_options)
        _tell_access("load", ptrs, mask, sys._getframe(1))
        return result

    return load


def _observed_store(create_masked_store):
    @functools.wraps(create_masked_store)
    def store(self, ptrs, value, mask, *options, **named_options):
        if _before:
            _tell_before("store", ptrs, _lanes(ptrs, mask)[1], {"value": value}, sys._getframe(1))
        result = create_masked_store(self, ptrs, value, mask, *options, **named_options)
        _tell_access("store", ptrs, mask, sys._getframe(1))
        return result

    return store


def _through_observers(kind, ptr, lanes, sem, perform, frame):
    """Run ``perform`` inside every observer's ``atomic`` (nested, so each sees the atomic as one step)."""
    addresses = np.ascontiguousarray(ptr.data, dtype=np.uint64).reshape(-1)
    itemsize = _itemsize(ptr)
    for observer in list(_observers):
        perform = functools.partial(_observing, observer, kind, addresses, lanes, itemsize, sem, perform)
    _reporting.frame = frame
    try:
        return perform()[0]
    finally:
        _reporting.frame = None


def _observing(observer, kind, addresses, lanes, itemsize, sem, perform):
    wrote = []

    def run():
        result, written = perform()
        wrote.append(written)
        return result, written

    return observer.atomic(kind, addresses, lanes, itemsize, sem, run), wrote[0]


def _observed_rmw(create_atomic_rmw):
    @functools.wraps(create_atomic_rmw)
    def rmw(self, rmw_op, ptr, val, mask, sem, scope):
        if not _observers or rmw_op not in RMW_KINDS or sem not in SEMANTICS:
            return create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope)
        _, lanes = _lanes(ptr, mask)
        if _before:
            _tell_before(RMW_KINDS[rmw_op], ptr, lanes, {"value": val}, sys._getframe(1))

        def perform():
            return create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope), lanes

        return _through_observers(RMW_KINDS[rmw_op], ptr, lanes, SEMANTICS[sem], perform, sys._getframe(1))

    return rmw


def _observed_cas(create_atomic_cas):
    @functools.wraps(create_atomic_cas)
    def cas(self, ptr, cmp, val, sem, scope):
        if not _observers or sem not in SEMANTICS:
            return create_atomic_cas(self, ptr, cmp, val, sem, scope)
        lanes = np.ones(np.shape(ptr.data), dtype=bool).reshape(-1)
        if _before:
            _tell_before("atomic_cas", ptr, lanes, {"compare": cmp, "value": val}, sys._getframe(1))

        def perform():
            result = create_atomic_cas(self, ptr, cmp, val, sem, scope)
            swapped = np.broadcast_to(result.data == cmp.data, np.shape(ptr.data)).reshape(-1)
            return result, swapped

        return _through_observers("atomic_cas", ptr, lanes, SEMANTICS[sem], perform, sys._getframe(1))

    return cas


def _observed_programs(set_grid_idx):
    @functools.wraps(set_grid_idx)
    def start_program(self, x, y, z):
        set_grid_idx(self, x, y, z)
        for observer in list(_observers):
            observer.program_started((x, y, z), self.grid_dim)

    return start_program


def _observed_launches(launch):
    @functools.wraps(launch)
    def run(self, *args, **kwargs):
        observers = list(_observers)
        for observer in observers:
            observer.launch_started(self.fn.__name__)
        try:
            return launch(self, *args, **kwargs)
        finally:
            for observer in observers:
                # One removed during the launch hears no more: the garbage collector may close a race
                # checker whose context is gone, in the middle of another context's launch.
                if observer in _observers:
                    observer.launch_finished()

    return run


def _install():
    builder = interpreter.InterpreterBuilder
    replace_once(builder, "create_masked_load", _observed_load)
    replace_once(builder, "create_masked_store", _observed_store)
    replace_once(builder, "create_atomic_rmw", _observed_rmw)
    replace_once(builder, "create_atomic_cas", _observed_cas)
    replace_once(builder, "set_grid_idx", _observed_programs)
    replace_once(interpreter.GridExecutor, "__call__", _observed_launches)
