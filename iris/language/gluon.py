"""The Gluon device API: :class:`IrisDeviceCtx`, a Gluon ``@aggregate`` with remote loads, stores and atomics.

Kernels take the class itself as their first, constexpr argument and the device context tensor
second, as upstream Iris's Gluon kernels do. Rank and world size are read from the context tensor at
run time, so one compiled kernel serves every rank. Translation is :func:`iris.language.core.translate`, the
same ``@triton.jit`` routine the Triton API uses (a ``@gluon.jit`` function may call it: the Gluon
code generator compiles callees in Gluon mode, and the routine's ``tl`` operations keep their
operands' layouts).

Layouts on the GPU (triton 3.6 to 3.9, compiled for sm_90 by tests/test_gluon_sm90.py): a kernel whose layouts
are all left to the compiler, such as one built on ``gl.arange(0, BLOCK)`` with no layout, fails to compile on
a GPU in the ``GluonResolveAutoEncodings`` pass with "'tt.make_range' op Failed to infer return type" (the CPU
interpreter ignores layouts and runs it). Every ``IrisDeviceCtx`` method therefore gives such pointer blocks
(and the values and masks of atomics) ``gl.CoalescedLayout()`` (:func:`anchor_auto_layout`), which the
compiler propagates to the rest of the kernel: upstream's layout-less examples run as written. Explicit
layouts are never changed. A kernel with no ``IrisDeviceCtx`` call still has nothing to anchor: give its range
a layout (``gl.CoalescedLayout()`` is portable across 32- and 64-wide warps; an explicit ``gl.BlockedLayout``
must match the warp width, 32 on NVIDIA, while AMD examples say 64, which :mod:`iris.language.warp_width` re-expresses
for 32), and launch inside :func:`iris.language.hints.layout_hints` (also importable from here) to get that advice
instead of the bare compiler error; it also explains a ``BlockedLayout`` that fits no warp width.

Examples
--------
>>> from iris.language.gluon import IrisDeviceCtx
>>> @gluon.jit
... def read_from_peer(IrisDeviceCtx: gl.constexpr, context_tensor, buf, out, peer: gl.constexpr,
...                    BLOCK: gl.constexpr):
...     ctx = IrisDeviceCtx.initialize(context_tensor)
...     offs = gl.arange(0, BLOCK)                  # layout-less: anchored by as_remote
...     gl.store(out + offs, gl.load(ctx.as_remote(buf + offs, peer)))
>>> read_from_peer[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, 1, 64)   # doctest: +SKIP
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import TRITON_BUILTIN
from triton.language.core import _aggregate as aggregate

from .core import HEAP_SIZE_SLOT, check_atomic_element, translate, volatile_load_modifier
from .hints import layout_hints  # noqa: F401  (public here too: the workbench imports it from iris.language.gluon)
from .trace_events import TraceEvent
from .tracing import DeviceTracing, initialize_tracing

_HEAP_SIZE_SLOT = gl.constexpr(HEAP_SIZE_SLOT)


def has_auto_layout(value) -> bool:
    """Whether ``value`` is a block whose layout is still Gluon's ``AutoLayout`` (left to the compiler)."""
    return isinstance(getattr(getattr(value, "type", None), "layout", None), gl.AutoLayout)


def anchor_auto_layout(value, _semantic=None):
    """``value`` with ``gl.CoalescedLayout()`` if its layout is automatic, else ``value`` unchanged (None too).

    Why: triton 3.6 to 3.9 cannot resolve a kernel whose layouts are all automatic (the user's layout-less
    ``gl.arange(0, BLOCK)``): ``GluonResolveAutoEncodings`` fails with "'tt.make_range' op Failed to infer
    return type". One anchored tensor is enough: the pass propagates its layout to the range, the masks
    and the values loaded through it. Explicit layouts are the user's choice and are never touched.

    A builtin (the code generator calls it with its semantic while compiling), so that it can decide from
    the operand's type and pass None through. The CPU interpreter runs kernels as Python, calls it with no
    semantic, and has no layouts to anchor.

    Examples
    --------
    >>> offs = gl.arange(0, BLOCK)                        # AutoLayout          # doctest: +SKIP
    >>> ptrs = anchor_auto_layout(buf + offs)             # CoalescedLayout     # doctest: +SKIP
    """
    if _semantic is None or not has_auto_layout(value):
        return value
    return _semantic.set_auto_layout(value, gl.CoalescedLayout())


setattr(anchor_auto_layout, TRITON_BUILTIN, True)


@aggregate
class IrisDeviceCtx:
    """This rank, the world size and the heap bases, read from ``ctx.get_device_context()`` at run time.

    Examples
    --------
    >>> @gluon.jit
    ... def bump(IrisDeviceCtx: gl.constexpr, context_tensor, counter, peer):
    ...     ctx = IrisDeviceCtx.initialize(context_tensor)
    ...     ctx.atomic_add(counter, 1, peer, sem="release", scope="sys")
    >>> bump[(1,)](IrisDeviceCtx, ctx.get_device_context(), counter, 1)   # doctest: +SKIP
    """

    cur_rank: gl.tensor
    num_ranks: gl.tensor
    heap_bases: gl.tensor
    tracing: DeviceTracing

    @gluon.constexpr_function  # see iris.language.core.DeviceContext.__init__
    def __init__(self, cur_rank, num_ranks, heap_bases, tracing):
        self.cur_rank = cur_rank
        self.num_ranks = num_ranks
        self.heap_bases = heap_bases
        self.tracing = tracing

    @staticmethod
    @gluon.jit
    def initialize(context_tensor, tracing: gl.constexpr = False):
        """Decode ``[cur_rank, num_ranks, heap_base_0 ...]`` from the device context tensor.

        ``tracing=True`` records every operation below, as :meth:`iris.DeviceContext.initialize` does.
        """
        num_ranks = gl.load(context_tensor + 1)
        return IrisDeviceCtx(gl.load(context_tensor), num_ranks, context_tensor + 2,
                             initialize_tracing(context_tensor, num_ranks, tracing))

    @gluon.jit
    def as_remote(self, ptr, rank, mask=None, hint: gl.constexpr = None):
        """``rank``'s address of ``ptr`` (pointers into this rank's heap), for plain ``gl.load``/``gl.store``.

        A block of pointers whose layout was left to the compiler (built from ``gl.arange(0, BLOCK)``
        with no layout) is given ``gl.CoalescedLayout()`` first: see :func:`anchor_auto_layout`.

        Examples
        --------
        >>> remote_ptr = ctx.as_remote(buf + offs, peer)       # translate once ...  # doctest: +SKIP
        >>> gl.store(out + offs, gl.load(remote_ptr))           # ... then plain loads  # doctest: +SKIP
        """
        heap_size_index = self.num_ranks + _HEAP_SIZE_SLOT
        ptr = anchor_auto_layout(ptr)
        return translate(ptr, self.cur_rank, rank, self.heap_bases, hint, mask, heap_size_index)

    @gluon.jit
    def _translate(self, ptr, from_rank, to_rank):
        """``ptr`` (an address in ``from_rank``'s heap) as an address in ``to_rank``'s heap: upstream's older
        ``IrisBackend._translate``; :meth:`as_remote` translates from this rank."""
        heap_size_index = self.num_ranks + _HEAP_SIZE_SLOT
        return translate(anchor_auto_layout(ptr), from_rank, to_rank, self.heap_bases, None, None,
                         heap_size_index)

    @gluon.jit
    def load(self, pointer, from_rank, mask=None, other=None, cache_modifier=None, volatile=False,
             hint: gl.constexpr = None):
        """Load ``from_rank``'s copy of ``pointer`` (``volatile=True`` with ``".ca"``/``".cg"``: refused)."""
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().load, from_rank, pointer, mask)
        remote = self.as_remote(pointer, from_rank, mask, hint)
        result = gl.load(remote, mask=mask, other=other, volatile=volatile,
                         cache_modifier=volatile_load_modifier(cache_modifier, volatile))
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def store(self, pointer, value, to_rank, mask=None, cache_modifier=None, hint: gl.constexpr = None):
        """Store ``value`` into ``to_rank``'s copy of ``pointer``."""
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().store, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        gl.store(remote, value, mask=mask, cache_modifier=cache_modifier)
        self.tracing.op_end(event)

    @gluon.jit
    def get(self, from_ptr, to_ptr, from_rank, mask=None, other=None, load_cache_modifier=None,
            store_cache_modifier=None, hint: gl.constexpr = None):
        """Copy ``from_rank``'s copy of ``from_ptr`` into this rank's ``to_ptr``."""
        from_ptr = anchor_auto_layout(from_ptr)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().get, from_rank, from_ptr, mask)
        value = gl.load(self.as_remote(from_ptr, from_rank, mask, hint), mask=mask, other=other,
                        cache_modifier=load_cache_modifier)
        gl.store(to_ptr, value, mask=mask, cache_modifier=store_cache_modifier)
        self.tracing.op_end(event)

    @gluon.jit
    def put(self, from_ptr, to_ptr, to_rank, mask=None, other=None, load_cache_modifier=None,
            store_cache_modifier=None, hint: gl.constexpr = None):
        """Copy this rank's ``from_ptr`` into ``to_rank``'s copy of ``to_ptr``."""
        to_ptr = anchor_auto_layout(to_ptr)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().put, to_rank, to_ptr, mask)
        value = gl.load(from_ptr, mask=mask, other=other, cache_modifier=load_cache_modifier)
        remote = self.as_remote(to_ptr, to_rank, mask, hint)
        gl.store(remote, value, mask=mask, cache_modifier=store_cache_modifier)
        self.tracing.op_end(event)

    @gluon.jit
    def copy(self, src_ptr, dst_ptr, from_rank, to_rank, mask=None, other=None, load_cache_modifier=None,
             store_cache_modifier=None, hint: gl.constexpr = None):
        """Copy ``from_rank``'s copy of ``src_ptr`` into ``to_rank``'s copy of ``dst_ptr``."""
        dst_ptr = anchor_auto_layout(dst_ptr)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().copy, to_rank, dst_ptr, mask)
        value = gl.load(self.as_remote(src_ptr, from_rank, mask, hint), mask=mask, other=other,
                        cache_modifier=load_cache_modifier)
        remote = self.as_remote(dst_ptr, to_rank, mask, hint)
        gl.store(remote, value, mask=mask, cache_modifier=store_cache_modifier)
        self.tracing.op_end(event)

    @gluon.jit
    def atomic_add(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic add into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_add", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_add, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_add(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_sub(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic subtract from ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_sub", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_sub, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_add(remote, -val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_xchg(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic exchange with ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_xchg", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_xchg, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_xchg(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_xor(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic xor into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_xor", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_xor, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_xor(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_and(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic and into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_and", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_and, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_and(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_or(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic or into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_or", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_or, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_or(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_min(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic minimum into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_min", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_min, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_min(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_max(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic maximum into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_max", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_max, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        val, mask = anchor_auto_layout(val), anchor_auto_layout(mask)
        result = gl.atomic_max(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @gluon.jit
    def atomic_cas(self, pointer, cmp, val, to_rank, sem=None, scope=None, hint: gl.constexpr = None):
        """Atomic compare-and-swap on ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("IrisDeviceCtx.atomic_cas", pointer.dtype.element_ty)
        pointer = anchor_auto_layout(pointer)  # one anchored block for the op and the event
        event = self.tracing.op_start(TraceEvent().atomic_cas, to_rank, pointer, None)
        remote = self.as_remote(pointer, to_rank, None, hint)
        cmp, val = anchor_auto_layout(cmp), anchor_auto_layout(val)
        result = gl.atomic_cas(remote, cmp, val, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result


Context = IrisDeviceCtx  # upstream Iris's name (iris.mem.gluon.context.Context)


# The barrier between the threads of a program (a CTA): triton 3.6 names it gl.thread_barrier, 3.7 and later
# gl.barrier (3.6 has no gl.barrier, 3.7 no gl.thread_barrier). One name that works on every supported triton,
# on the GPU and on the CPU interpreter (where a program is one thread and the barrier does nothing).
if hasattr(gl, "barrier"):
    @gluon.jit
    def cta_barrier():
        """Wait until every thread of this program gets here (``gl.barrier()``; ``gl.thread_barrier()`` on
        triton 3.6), e.g. between a block's stores and the one-thread atomic that releases them.

        Examples
        --------
        >>> from iris.language.gluon import cta_barrier
        >>> ctx.store(counter, value + 1, 0)                    # doctest: +SKIP
        >>> cta_barrier()                                       # doctest: +SKIP
        >>> ctx.atomic_xchg(lock, 0, 0, sem="release")          # doctest: +SKIP
        """
        gl.barrier()
else:
    @gluon.jit
    def cta_barrier():
        """Wait until every thread of this program gets here (``gl.thread_barrier()`` on triton 3.6)."""
        gl.thread_barrier()
