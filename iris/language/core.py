"""The Triton device API: remote loads, stores, copies and atomics on other ranks' symmetric heaps.

Two spellings of the same operations, both compatible with upstream Iris:

* the functional API (``iris.load``, ``iris.store``, ``iris.get``, ``iris.put``, ``iris.copy``,
  ``iris.atomic_*``), with upstream's positional signatures, taking ``heap_bases`` from
  ``ctx.get_heap_bases()``;
* :class:`DeviceContext`, a Triton ``@aggregate`` built from ``ctx.get_device_context()``, whose
  methods take only the peer rank, plus :meth:`DeviceContext.as_remote` to translate once and then use
  plain ``tl.load``/``tl.store`` (hoisting translation out of loops).

Pointers are always addresses in the *calling* rank's heap. Every operation goes through
:func:`translate`, the one place that maps them to another rank's heap; ``iris.language.gluon`` uses it too.

Debug mode (``IRIS_DEBUG=1`` or ``iris.iris(..., debug=True)``) makes :func:`translate` check that
each translated pointer lies in the heap it is translated from: a bad pointer is then an error naming
the kernel and rank instead of a segfault or silent corruption. See :func:`enable_debug_checks`.

A rank whose heap this process does not map (on another host) cannot be addressed: its base in ``heap_bases`` is
:data:`iris.heap.reach.UNMAPPED_BASE`, far above any mapped address. On the CPU interpreter :func:`translate`
refuses it always, with an error naming both ranks, their hosts and what connects them
(:mod:`iris.interpret.unmapped_peers`); on a GPU debug mode asserts it, and without debug mode the access faults
(an illegal address), never reaching memory mapped here.

Examples
--------
>>> @triton.jit
... def ring_put(buf, heap_bases, rank, world, BLOCK: tl.constexpr):
...     offs = tl.arange(0, BLOCK)
...     iris.put(buf + offs, buf + offs, rank, (rank + 1) % world, heap_bases)
>>> ring_put[(1,)](buf, ctx.get_heap_bases(), ctx.cur_rank, ctx.num_ranks, BLOCK=64)   # doctest: +SKIP
"""

import warnings

import numpy as np
import triton
import triton.language as tl
from triton.language.core import _aggregate as aggregate

from ..base.errors import RaisedAsIs
from ..heap.reach import UNMAPPED_BASE
from ..interpret import unmapped_peers
from . import tile_collectives
from .trace_events import TRACING_SLOTS, TraceEvent
from .tracing import DeviceTracing, initialize_tracing

# The device context is upstream's ``[cur_rank, num_ranks, base_0 .. base_{n-1}, 17 tracing slots]``
# (iris.language.trace_events) followed by one entry of ours: the heap size, for debug checks. Upstream uses
# all 17 tracing slots, so the heap size comes after them; relative to ``heap_bases = context + 2`` it
# sits at ``num_ranks + HEAP_SIZE_SLOT``.
HEAP_SIZE_SLOT = TRACING_SLOTS
_HEAP_SIZE_SLOT = tl.constexpr(HEAP_SIZE_SLOT)

# ``get_heap_bases()`` is a view starting one entry into ``[heap_size, base_0 .. base_{n-1}]``, so
# the functional API finds the heap size at ``heap_bases[-1]`` without changing upstream's layout.
_SIZE_BEFORE_BASES = tl.constexpr(-1)

OUT_OF_HEAP = "iris debug: pointer outside the symmetric heap it is translated from"
_OUT_OF_HEAP = tl.constexpr(OUT_OF_HEAP)  # jit code reads only constexpr globals
UNMAPPED = ("iris debug: pointer translated to a rank whose heap this rank does not map (another host, or a peer "
            "a provider's table marks not direct); ctx.topology.explain(rank, peer) says what connects them")
_UNMAPPED = tl.constexpr(UNMAPPED)
_UNMAPPED_BASE = tl.constexpr(UNMAPPED_BASE)
_WRONG_RANK = tl.constexpr(
    "iris debug: DeviceContext.initialize got a rank or world_size other than the context tensor's; "
    "launch with rank=ctx.get_rank(), world_size=ctx.get_num_ranks()")

# PTX spells a volatile load ld.volatile, which takes no cache operator: ptxas rejects ld.volatile.global.ca
# and .cg ("Modifier '.volatile' cannot be combined with modifier '.cg'"). For .cv triton 3.6 and 3.7 emit a
# plain ld.volatile, but 3.8 and later emit ld.volatile.cv, which ptxas rejects too; .cv ("fetch again") says
# what volatile already does, so iris drops it and every triton emits the plain ld.volatile.
# AMD GPUs accept every combination, so upstream Iris's code and tests may use them.
PTX_REFUSES_VOLATILE_WITH = (".ca", ".cg")
IMPLIED_BY_VOLATILE = ".cv"
VOLATILE_WITH_CACHE_MODIFIER = (
    "a load with volatile=True cannot take cache_modifier={modifier!r}: PTX has no volatile load with a cache "
    "operator, so NVIDIA GPUs refuse it (ptxas: \"Modifier '.volatile' cannot be combined with modifier "
    "'{modifier}'\"). Drop the cache modifier: volatile=True already reads memory on every load. (AMD GPUs "
    "accept the pair, which is why code written for upstream Iris may have it.)"
)


class VolatileCacheModifierError(ValueError):
    """A load asked for ``volatile=True`` with a cache modifier PTX cannot combine with it (``.ca``, ``.cg``)."""

    def __init__(self, modifier: str):
        super().__init__(VOLATILE_WITH_CACHE_MODIFIER.format(modifier=modifier))


class VolatileCacheModifierWarning(UserWarning):
    """The same load on the CPU interpreter, which runs it (as AMD GPUs do) but an NVIDIA GPU would not."""

    def __init__(self, modifier: str):
        super().__init__(VOLATILE_WITH_CACHE_MODIFIER.format(modifier=modifier) + " The CPU interpreter runs it; "
                         "a GPU compile would fail.")


@triton.constexpr_function
def volatile_load_modifier(cache_modifier, volatile):
    """The cache modifier a load gets: ``""`` for a volatile ``.cv`` load; a volatile load with a cache
    modifier that PTX cannot express refused when compiling for a GPU, a warning on the CPU interpreter.

    Called by every iris load that takes ``volatile`` (``iris.load``, ``DeviceContext.load``,
    ``IrisDeviceCtx.load``). Why not refused everywhere: upstream Iris's code and tests use such loads (AMD
    GPUs accept them) and are to run here unchanged, and the interpreter loses nothing by running them; the
    warning says that the same kernel will not compile for an NVIDIA GPU, and what to change. A constexpr
    function, so the check costs nothing in the compiled kernel. (It raises and warns with classes, not
    formatted strings, through a class: Triton rejects any other callable a kernel's code refers to.)

    Returns
    -------
    str
        ``cache_modifier``, or ``""`` for ``volatile=True`` with ``".cv"``: a volatile load already fetches
        again, and triton 3.8 and later would emit ``ld.volatile.cv``, which ptxas rejects.

    Raises
    ------
    VolatileCacheModifierError
        A ``ValueError`` saying :data:`VOLATILE_WITH_CACHE_MODIFIER`, for ``volatile=True`` with ``".ca"``
        or ``".cg"`` compiled for a GPU; Triton reports it as the cause of a ``CompilationError`` at the call.

    Warns
    -----
    VolatileCacheModifierWarning
        The same, on the CPU interpreter (once per call site, as Python's warnings are).

    Examples
    --------
    >>> x = iris.load(flag, rank, peer, heap_bases, volatile=True)                       # doctest: +SKIP
    >>> x = iris.load(flag, rank, peer, heap_bases, volatile=True, cache_modifier=".cg")  # doctest: +SKIP
    Traceback (most recent call last):
    iris.language.core.VolatileCacheModifierError: a load with volatile=True cannot take cache_modifier='.cg': ...
    """
    _VolatileLoadCheck(cache_modifier, volatile)
    return "" if volatile and cache_modifier == IMPLIED_BY_VOLATILE else cache_modifier


class _VolatileLoadCheck:
    """The check of :func:`volatile_load_modifier`, as a class: Triton lets kernel code (constexpr functions
    included) refer to classes but not to functions such as ``warnings.warn``."""

    def __init__(self, cache_modifier, volatile):
        if not (volatile and cache_modifier in PTX_REFUSES_VOLATILE_WITH):
            return
        if not triton.knobs.runtime.interpret:
            raise VolatileCacheModifierError(cache_modifier)
        warnings.warn(VolatileCacheModifierWarning(cache_modifier), stacklevel=4)  # at the kernel's call


# Which element types Triton's atomics take (triton's ``atom_red_typechecking_impl`` and ``atomic_cas``, 3.6 to
# 3.9; tests/test_device_diff.py checks this table against the installed triton's sm_90 compiler): an NVIDIA GPU
# refuses the rest when compiling, and so does the CPU interpreter, but Triton's messages name neither the iris op
# nor the rank (``atomic_sub`` on int8 said "atomic_add does not support int8").
ATOMIC_ELEMENT_TYPES = {
    "cas": ("fp64", "fp32", "fp16", "bf16", "int64", "int32", "int16", "uint64", "uint32", "uint16"),
    "add": ("fp64", "fp32", "fp16", "bf16", "int64", "int32", "uint64", "uint32"),
    "other": ("fp64", "fp32", "int64", "int32", "uint64", "uint32"),  # xchg, and, or, xor, min, max
}


class UnsupportedAtomicError(RaisedAsIs, TypeError):
    """An iris atomic on an element type that Triton's atomics do not take, on a GPU as on the CPU.

    Examples
    --------
    >>> iris.atomic_sub(counter_i8, 1, rank, peer, heap_bases)   # doctest: +SKIP
    Traceback (most recent call last):
    iris.language.core.UnsupportedAtomicError: iris.atomic_sub on int8 (rank 0): ...
    """

    def __init__(self, op: str, element: str, rank):
        where = f" (rank {rank})" if rank is not None else ""
        super().__init__(
            f"{op} on {element}{where}: Triton's atomics refuse {element} on every backend; an NVIDIA GPU refuses "
            f"it too, when compiling (the CPU interpreter does the same, at run time). This op takes "
            f"{', '.join(atomic_element_types(op))}. Keep the value in a wider tensor (int32 for small "
            f"integers), or build it from atomic_cas on the 32-bit word that holds it.")


@triton.constexpr_function
def check_atomic_element(op, element):
    """Refuse an atomic on an element type Triton's atomics do not take, naming the op, the type and the rank.

    Called first by every iris atomic (functional, :class:`DeviceContext`, ``IrisDeviceCtx``); a constexpr
    function, so it costs nothing in a compiled kernel and changes nothing the valid kernels compile to.

    Raises
    ------
    UnsupportedAtomicError
        A ``TypeError`` that names the op, the type, this process's rank and the types the op takes.

    Examples
    --------
    >>> check_atomic_element("iris.atomic_add", tl.float16)   # accepted: returns None
    """
    _AtomicElementCheck(op, element)


def atomic_element_types(op: str) -> tuple:
    """The element types Triton's atomic ``op`` takes (:data:`ATOMIC_ELEMENT_TYPES`), for any spelling of the op.

    Examples
    --------
    >>> atomic_element_types("iris.DeviceContext.atomic_sub") == atomic_element_types("add")
    True
    """
    name = op.rsplit("atomic_", 1)[-1]
    return ATOMIC_ELEMENT_TYPES["cas" if name == "cas" else "add" if name in ("add", "sub") else "other"]


class _AtomicElementCheck:
    """The check of :func:`check_atomic_element`, as a class (kernel code may refer to classes, not functions)."""

    def __init__(self, op, element):
        name = str(getattr(element, "value", element))
        if name not in atomic_element_types(op):
            import torch.distributed as dist

            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else _debug_rank
            raise UnsupportedAtomicError(op, name, rank)


@triton.jit
def translate(ptr, from_rank, to_rank, heap_bases, hint: tl.constexpr = None, mask=None,
              heap_size_index=_SIZE_BEFORE_BASES):
    """Map pointers into ``from_rank``'s heap to the same offsets in ``to_rank``'s heap.

    ``heap_bases[r]`` is where this process sees rank r's heap, so the address is
    ``heap_bases[to_rank] + (ptr - heap_bases[from_rank])``. The integer round trip loses what the
    compiler knew about alignment and contiguity; ``hint`` restores it.

    Parameters
    ----------
    ptr : pointer or block of pointers
        Addresses in ``from_rank``'s heap.
    from_rank, to_rank : int or scalar tensor
        Ranks whose heaps the pointer is translated from and to.
    heap_bases : pointer to int64
        ``ctx.get_heap_bases()`` (or ``context_tensor + 2`` from the device context), or any table of every rank's
        address of one allocation (``ctx.allocate_symmetric``'s ``peer_bases``, a provider's:
        :mod:`iris.runtime.symmetric_memory`). Debug mode reads the size to check against at
        ``heap_bases[heap_size_index]``: the tables iris makes carry it there.
    hint : constexpr int or tuple, optional
        Divisibility and contiguity of the translated block (e.g. 16, or ``(1, BLOCK_N)`` in 2-D),
        applied with ``tl.multiple_of`` then ``tl.max_contiguous``.
    mask : block of bool, optional
        Lanes to check in debug mode (masked-off lanes may point anywhere).
    heap_size_index : int
        Where ``heap_bases[heap_size_index]`` holds the heap size, read only in debug mode.

    Returns
    -------
    pointer or block of pointers
        Same shape and element type as ``ptr``.

    Examples
    --------
    >>> peer_ptrs = translate(buf + offs, rank, peer, heap_bases, hint=16)   # doctest: +SKIP
    """
    offset = ptr.to(tl.int64) - tl.load(heap_bases + from_rank)
    base = tl.load(heap_bases + to_rank)
    if unmapped_peers.CHECKS:  # interpreter only: a rank on another host (base 0) is a clear error
        unmapped_peers.refuse_unmapped(base, to_rank, mask)
    if _debug_checks_on():
        heap_size = tl.load(heap_bases + heap_size_index)
        tl.device_assert((offset >= 0) & (offset < heap_size), _OUT_OF_HEAP, mask=mask)
        # UNMAPPED_BASE in the heap's tables, 0 in a provider's (torch's: iris.runtime.symmetric_memory)
        tl.device_assert((base != _UNMAPPED_BASE) & (base != 0), _UNMAPPED, mask=mask)
    remote = (base + offset).to(ptr.dtype)
    if hint is not None:
        remote = tl.max_contiguous(tl.multiple_of(remote, hint), hint)
    return remote


# -- the functional API (upstream Iris's signatures) ---------------------------------------------

@triton.jit
def load(pointer, to_rank, from_rank, heap_bases, mask=None, other=None, cache_modifier=None, volatile=False,
         hint: tl.constexpr = None):
    """Load ``from_rank``'s copy of ``pointer``; ``to_rank`` is the calling rank (upstream's names).

    ``volatile=True`` with ``cache_modifier=".ca"`` or ``".cg"`` is refused (:func:`volatile_load_modifier`).

    Examples
    --------
    >>> x = iris.load(buf + offs, cur_rank, peer, heap_bases, mask=offs < n)   # doctest: +SKIP
    """
    remote = translate(pointer, to_rank, from_rank, heap_bases, hint, mask)
    return tl.load(remote, mask=mask, other=other, volatile=volatile,
                   cache_modifier=volatile_load_modifier(cache_modifier, volatile))


@triton.jit
def store(pointer, value, from_rank, to_rank, heap_bases, mask=None, hint: tl.constexpr = None,
          cache_modifier=None):
    """Store ``value`` into ``to_rank``'s copy of ``pointer``; ``from_rank`` is the calling rank.

    ``hint`` comes before ``cache_modifier`` here, as in upstream's ``store``.

    Examples
    --------
    >>> iris.store(buf + offs, x, cur_rank, peer, heap_bases, mask=offs < n)   # doctest: +SKIP
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    tl.store(remote, value, mask=mask, cache_modifier=cache_modifier)


@triton.jit
def get(from_ptr, to_ptr, from_rank, to_rank, heap_bases, mask=None, other=None, load_cache_modifier=None,
        store_cache_modifier=None, hint: tl.constexpr = None):
    """Copy ``to_rank``'s copy of ``from_ptr`` into the calling rank's ``to_ptr``.

    The rank names follow upstream and describe the *translation* (from the calling rank's address
    space to the peer's), not the data flow: ``from_rank`` is the calling rank and ``to_rank`` the
    rank that is read. Positionally: ``get(remote_src, local_dst, cur_rank, remote_rank, heap_bases)``.

    Examples
    --------
    >>> iris.get(buf + offs, local + offs, cur_rank, peer, heap_bases)   # local <- peer's buf
    """
    remote = translate(from_ptr, from_rank, to_rank, heap_bases, hint, mask)
    value = tl.load(remote, mask=mask, other=other, cache_modifier=load_cache_modifier)
    tl.store(to_ptr, value, mask=mask, cache_modifier=store_cache_modifier)


@triton.jit
def put(from_ptr, to_ptr, from_rank, to_rank, heap_bases, mask=None, other=None, load_cache_modifier=None,
        store_cache_modifier=None, hint: tl.constexpr = None):
    """Copy the calling rank's ``from_ptr`` into ``to_rank``'s copy of ``to_ptr`` (``from_rank``: the caller).

    Examples
    --------
    >>> iris.put(local + offs, buf + offs, cur_rank, peer, heap_bases)   # peer's buf <- local
    """
    value = tl.load(from_ptr, mask=mask, other=other, cache_modifier=load_cache_modifier)
    remote = translate(to_ptr, from_rank, to_rank, heap_bases, hint, mask)
    tl.store(remote, value, mask=mask, cache_modifier=store_cache_modifier)


@triton.jit
def copy(src_ptr, dst_ptr, from_rank, to_rank, cur_rank, heap_bases, mask=None, other=None,
         load_cache_modifier=None, store_cache_modifier=None, hint: tl.constexpr = None):
    """Copy ``from_rank``'s copy of ``src_ptr`` into ``to_rank``'s copy of ``dst_ptr``.

    Both pointers are addresses in the calling rank's (``cur_rank``'s) heap; either rank may be a peer.

    Examples
    --------
    >>> iris.copy(a + offs, b + offs, left, right, cur_rank, heap_bases)   # right's b <- left's a
    """
    src = translate(src_ptr, cur_rank, from_rank, heap_bases, hint, mask)
    dst = translate(dst_ptr, cur_rank, to_rank, heap_bases, hint, mask)
    value = tl.load(src, mask=mask, other=other, cache_modifier=load_cache_modifier)
    tl.store(dst, value, mask=mask, cache_modifier=store_cache_modifier)


# Atomics return the old values. sem: "acquire", "release", "acq_rel" (None: acq_rel) or "relaxed";
# scope: "gpu" (None), "cta" or "sys" (needed across GPUs). The CPU interpreter ignores scope.

@triton.jit
def atomic_add(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
               hint: tl.constexpr = None):
    """Atomically add ``val`` to ``to_rank``'s copy of ``pointer``; return the old values.

    Examples
    --------
    >>> old = iris.atomic_add(counter, 1, cur_rank, peer, heap_bases, sem="release", scope="sys")
    """
    check_atomic_element("iris.atomic_add", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_add(remote, val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_sub(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
               hint: tl.constexpr = None):
    """Atomically subtract ``val`` from ``to_rank``'s copy of ``pointer``; return the old values."""
    check_atomic_element("iris.atomic_sub", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_add(remote, -val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xchg(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
                hint: tl.constexpr = None):
    """Atomically swap ``val`` into ``to_rank``'s copy of ``pointer``; return the old values."""
    check_atomic_element("iris.atomic_xchg", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_xchg(remote, val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xor(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
               hint: tl.constexpr = None):
    """Atomic bitwise xor into ``to_rank``'s copy of ``pointer``; return the old values."""
    check_atomic_element("iris.atomic_xor", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_xor(remote, val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_and(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
               hint: tl.constexpr = None):
    """Atomic bitwise and into ``to_rank``'s copy of ``pointer``; return the old values."""
    check_atomic_element("iris.atomic_and", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_and(remote, val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_or(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
              hint: tl.constexpr = None):
    """Atomic bitwise or into ``to_rank``'s copy of ``pointer``; return the old values."""
    check_atomic_element("iris.atomic_or", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_or(remote, val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_min(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
               hint: tl.constexpr = None):
    """Atomic minimum into ``to_rank``'s copy of ``pointer``; return the old values."""
    check_atomic_element("iris.atomic_min", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_min(remote, val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_max(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem=None, scope=None,
               hint: tl.constexpr = None):
    """Atomic maximum into ``to_rank``'s copy of ``pointer``; return the old values."""
    check_atomic_element("iris.atomic_max", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask)
    return tl.atomic_max(remote, val, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_cas(pointer, cmp, val, from_rank, to_rank, heap_bases, sem=None, scope=None,
               hint: tl.constexpr = None):
    """Atomically set ``to_rank``'s copy of ``pointer`` to ``val`` where it equals ``cmp``; return old values.

    No mask, as upstream (and ``tl.atomic_cas``).

    Examples
    --------
    >>> while iris.atomic_cas(lock, 0, 1, cur_rank, 0, heap_bases, sem="acquire") != 0:   # doctest: +SKIP
    ...     pass
    """
    check_atomic_element("iris.atomic_cas", pointer.dtype.element_ty)
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint)
    return tl.atomic_cas(remote, cmp, val, sem=sem, scope=scope)


# -- DeviceContext -------------------------------------------------------------------------------

@aggregate
class DeviceContext:
    """The calling rank, the world size and the heap bases, decoded from ``ctx.get_device_context()``.

    Build it with :meth:`initialize` inside a kernel; ``rank`` and ``world_size`` are constexprs (as
    upstream), so kernels are specialised per rank. Every method takes only the peer rank.

    Examples
    --------
    >>> @triton.jit
    ... def ring_put(context, buf, rank: tl.constexpr, world: tl.constexpr, BLOCK: tl.constexpr):
    ...     ctx = iris.DeviceContext.initialize(context, rank, world)
    ...     offs = tl.arange(0, BLOCK)
    ...     ctx.put(buf + offs, buf + offs, (rank + 1) % world)
    >>> ring_put[(1,)](ctx.get_device_context(), buf, ctx.cur_rank, ctx.num_ranks, BLOCK=64)  # doctest: +SKIP
    """

    rank: tl.constexpr
    world_size: tl.constexpr
    heap_bases: tl.tensor
    tracing: DeviceTracing

    # A constexpr_function because Triton hashes an aggregate's __init__ into kernels' cache keys and
    # accepts only jit-callables there; it receives plain values, hence the constexpr wrapping.
    @triton.constexpr_function
    def __init__(self, rank, world_size, heap_bases, tracing):
        self.rank = tl.constexpr(rank)
        self.world_size = tl.constexpr(world_size)
        self.heap_bases = heap_bases
        self.tracing = tracing

    @staticmethod
    @triton.jit
    def initialize(context_tensor, rank: tl.constexpr, world_size: tl.constexpr, tracing: tl.constexpr = False):
        """Decode ``context_tensor``; ``rank``/``world_size`` must be this rank's (checked in debug mode).

        ``tracing=True`` records every operation below into ``ctx.tracing``'s buffers (enable them on the host
        first: ``ctx.tracing.enable()``) and gives the kernel ``ctx.tracing.record_event_start/end``
        (:class:`iris.language.tracing.DeviceTracing`). Off, the kernel holds no tracing code.
        """
        if _debug_checks_on():
            tl.device_assert((tl.load(context_tensor) == rank) & (tl.load(context_tensor + 1) == world_size),
                             _WRONG_RANK)
        return DeviceContext(rank, world_size, context_tensor + 2,
                             initialize_tracing(context_tensor, world_size, tracing))

    @triton.jit
    def as_remote(self, ptr, rank, mask=None, hint: tl.constexpr = None):
        """``rank``'s address of ``ptr`` (pointers into this rank's heap), for plain ``tl.load``/``tl.store``.

        Examples
        --------
        >>> peer_buf = ctx.as_remote(buf + offs, peer)      # translate once, outside the loop
        >>> for i in range(steps):
        ...     acc += tl.load(peer_buf + i * stride)
        """
        return translate(ptr, self.rank, rank, self.heap_bases, hint, mask, self.world_size + _HEAP_SIZE_SLOT)

    @triton.jit
    def load(self, pointer, from_rank, mask=None, other=None, cache_modifier=None, volatile=False,
             hint: tl.constexpr = None):
        """Load ``from_rank``'s copy of ``pointer`` (``volatile=True`` with ``".ca"``/``".cg"``: refused)."""
        event = self.tracing.op_start(TraceEvent().load, from_rank, pointer, mask)
        remote = self.as_remote(pointer, from_rank, mask, hint)
        result = tl.load(remote, mask=mask, other=other, volatile=volatile,
                         cache_modifier=volatile_load_modifier(cache_modifier, volatile))
        self.tracing.op_end(event)
        return result

    @triton.jit
    def store(self, pointer, value, to_rank, mask=None, cache_modifier=None, hint: tl.constexpr = None):
        """Store ``value`` into ``to_rank``'s copy of ``pointer``."""
        event = self.tracing.op_start(TraceEvent().store, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        tl.store(remote, value, mask=mask, cache_modifier=cache_modifier)
        self.tracing.op_end(event)

    @triton.jit
    def get(self, from_ptr, to_ptr, from_rank, mask=None, other=None, load_cache_modifier=None,
            store_cache_modifier=None, hint: tl.constexpr = None):
        """Copy ``from_rank``'s copy of ``from_ptr`` into this rank's ``to_ptr``."""
        event = self.tracing.op_start(TraceEvent().get, from_rank, from_ptr, mask)
        value = tl.load(self.as_remote(from_ptr, from_rank, mask, hint), mask=mask, other=other,
                        cache_modifier=load_cache_modifier)
        tl.store(to_ptr, value, mask=mask, cache_modifier=store_cache_modifier)
        self.tracing.op_end(event)

    @triton.jit
    def put(self, from_ptr, to_ptr, to_rank, mask=None, other=None, load_cache_modifier=None,
            store_cache_modifier=None, hint: tl.constexpr = None):
        """Copy this rank's ``from_ptr`` into ``to_rank``'s copy of ``to_ptr``."""
        event = self.tracing.op_start(TraceEvent().put, to_rank, to_ptr, mask)
        value = tl.load(from_ptr, mask=mask, other=other, cache_modifier=load_cache_modifier)
        remote = self.as_remote(to_ptr, to_rank, mask, hint)
        tl.store(remote, value, mask=mask, cache_modifier=store_cache_modifier)
        self.tracing.op_end(event)

    @triton.jit
    def copy(self, src_ptr, dst_ptr, from_rank, to_rank, mask=None, other=None, load_cache_modifier=None,
             store_cache_modifier=None, hint: tl.constexpr = None):
        """Copy ``from_rank``'s copy of ``src_ptr`` into ``to_rank``'s copy of ``dst_ptr``."""
        event = self.tracing.op_start(TraceEvent().copy, to_rank, dst_ptr, mask)
        value = tl.load(self.as_remote(src_ptr, from_rank, mask, hint), mask=mask, other=other,
                        cache_modifier=load_cache_modifier)
        remote = self.as_remote(dst_ptr, to_rank, mask, hint)
        tl.store(remote, value, mask=mask, cache_modifier=store_cache_modifier)
        self.tracing.op_end(event)

    @triton.jit
    def atomic_add(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic add into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_add", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_add, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_add(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_sub(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic subtract from ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_sub", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_sub, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_add(remote, -val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_xchg(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic exchange with ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_xchg", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_xchg, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_xchg(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_xor(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic xor into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_xor", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_xor, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_xor(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_and(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic and into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_and", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_and, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_and(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_or(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic or into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_or", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_or, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_or(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_min(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic minimum into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_min", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_min, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_min(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_max(self, pointer, val, to_rank, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic maximum into ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_max", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_max, to_rank, pointer, mask)
        remote = self.as_remote(pointer, to_rank, mask, hint)
        result = tl.atomic_max(remote, val, mask=mask, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    @triton.jit
    def atomic_cas(self, pointer, cmp, val, to_rank, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic compare-and-swap on ``to_rank``'s copy of ``pointer``; returns the old values."""
        check_atomic_element("iris.DeviceContext.atomic_cas", pointer.dtype.element_ty)
        event = self.tracing.op_start(TraceEvent().atomic_cas, to_rank, pointer, None)
        remote = self.as_remote(pointer, to_rank, None, hint)
        result = tl.atomic_cas(remote, cmp, val, sem=sem, scope=scope)
        self.tracing.op_end(event)
        return result

    # -- tile-level collectives (upstream's names; bodies and what each expects: .tile_collectives) --------

    @triton.jit
    def all_reduce_atomic(self, tile, dst_view):
        """Add ``tile.data`` into every rank's ``dst_view`` tile with atomics; ``dst`` zeroed on all ranks first."""
        tile_collectives.all_reduce_atomic(self, tile, dst_view)

    @triton.jit
    def all_reduce_spinlock(self, tile, dst_view, locks):
        """Add ``tile.data`` into every rank's ``dst_view`` tile under that rank's ``locks[tile_id]``."""
        tile_collectives.all_reduce_spinlock(self, tile, dst_view, locks)

    @triton.jit
    def all_reduce_one_shot(self, tile, src_view, dst_view, locks):
        """Sum every rank's published ``src_view`` tile (``locks[tile_id]`` == 1) into this rank's ``dst_view``."""
        tile_collectives.all_reduce_one_shot(self, tile, src_view, dst_view, locks)

    @triton.jit
    def all_reduce_two_shot(self, tile, src_view, dst_view, locks):
        """Rank ``tile_id % world_size`` sums the published tiles and writes the sum into every rank's ``dst``."""
        tile_collectives.all_reduce_two_shot(self, tile, src_view, dst_view, locks)

    @triton.jit
    def all_reduce_push(self, tile, inbox_view, dst_view, locks):
        """Rank ``tile_id % world_size`` sums the tiles its peers stored into its inbox and stores the sum into
        every rank's ``dst`` (not upstream's; only remote stores)."""
        tile_collectives.all_reduce_push(self, tile, inbox_view, dst_view, locks)

    @triton.jit
    def all_reduce_ring(self, tile, src_view, dst_view):
        """Sum every rank's ``src_view`` tile, peers read in ring order, into this rank's ``dst_view``."""
        tile_collectives.all_reduce_ring(self, tile, src_view, dst_view)

    @triton.jit
    def all_gather(self, tile, dst_view, dim: tl.constexpr):
        """Write ``tile.data`` into this rank's part (rows: ``dim=0``, columns: 1) of every rank's ``dst_view``."""
        tile_collectives.all_gather(self, tile, dst_view, dim)

    @triton.jit
    def gather(self, tile, src_view, source_rank: tl.constexpr, hint: tl.constexpr = None):
        """Return ``source_rank``'s ``src_view`` tile."""
        return tile_collectives.gather(self, tile, src_view, source_rank, hint)

    @triton.jit
    def all_to_all(self, tile, src_view, dst_view, N_per_rank: tl.constexpr):
        """Fill this ``dst_view`` tile: column chunk ``s`` from chunk ``rank`` of rank ``s``'s ``src_view``."""
        tile_collectives.all_to_all(self, tile, src_view, dst_view, N_per_rank)

    @triton.jit
    def reduce_scatter(self, tile, src_view, dst_view, locks):
        """Sum the published tiles of this rank's contiguous share of the tiles into its ``dst_view``."""
        tile_collectives.reduce_scatter(self, tile, src_view, dst_view, locks)


Context = DeviceContext  # upstream Iris's name (iris.Context, iris.mem.triton.context.Context)


# -- debug mode ----------------------------------------------------------------------------------

@triton.constexpr_function
def _debug_checks_on():
    # Read when a kernel is compiled (on the interpreter: when it runs). On the GPU the knob is also
    # part of every kernel's compile options, hence of its cache key: switching debug mode on
    # recompiles instead of reusing unchecked binaries. Off, the checks are not even traced.
    return triton.knobs.runtime.debug


class IrisDebugError(RuntimeError):
    """A debug-mode check failed in a kernel: a pointer outside the heap, or a wrong DeviceContext rank."""


_debug_rank = None  # the rank named in interpreter error messages; set by enable_debug_checks


def enable_debug_checks(rank: int) -> None:
    """Check every pointer that iris translates, in kernels compiled (or interpreted) from now on.

    Turns on Triton's debug option (``triton.knobs.runtime.debug``, as ``TRITON_DEBUG=1`` would), which
    compiles :func:`translate`'s ``tl.device_assert`` in: on a GPU a bad pointer stops the kernel with
    CUDA's device-assert report (file, line, kernel, block, thread) quoting :data:`OUT_OF_HEAP`; on the
    CPU interpreter it raises :class:`IrisDebugError` naming the kernel, ``rank``, the heap and the offset.
    Triton's other debug checks (integer overflow, user ``tl.device_assert``) come on too.

    Parameters
    ----------
    rank : int
        This process's rank, for the error messages.

    Examples
    --------
    >>> ctx = iris.iris("64MiB", debug=True)    # calls enable_debug_checks(ctx.cur_rank)  # doctest: +SKIP
    """
    global _debug_rank
    _debug_rank = rank
    triton.knobs.runtime.debug = True
    if triton.knobs.runtime.interpret:
        from ..interpret.debug import enable_device_asserts

        enable_device_asserts(_explain_failed_check)


def _explain_failed_check(kernel: str, failure: AssertionError):
    """The IrisDebugError for a failed iris check in an interpreted kernel; None for other assertions."""
    if not str(failure).startswith("iris debug:"):
        return None
    what = _describe_bad_translation(failure) if str(failure) == OUT_OF_HEAP else str(failure)
    return IrisDebugError(f"iris debug: kernel `{kernel}` on rank {_debug_rank}: {what.removeprefix('iris debug: ')}")


def _value(x):
    """A Python/numpy value of what an interpreted kernel holds (tensor, constexpr or int)."""
    x = getattr(x, "value", x)
    handle = getattr(x, "handle", None)
    return handle.data if handle is not None else x


def _scalar(x) -> int:
    """The int an interpreted kernel's scalar holds: a one-element array there, which numpy >= 2.4 no longer
    converts with ``int()``."""
    return int(np.asarray(_value(x)).reshape(-1)[0])


def _describe_bad_translation(failure: AssertionError) -> str:
    # On the interpreter the assertion is raised while translate() runs, so its frame still holds the
    # offending offsets and ranks.
    tb = failure.__traceback__
    frame = None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "translate" and "offset" in tb.tb_frame.f_locals:
            frame = tb.tb_frame.f_locals
        tb = tb.tb_next
    if frame is None:
        return OUT_OF_HEAP
    offsets, size = _value(frame["offset"]).reshape(-1), _scalar(frame["heap_size"])
    bad = (offsets < 0) | (offsets >= size)
    if frame.get("mask") is not None:
        bad &= _value(frame["mask"]).reshape(-1).astype(bool)
    source, target = _scalar(frame["from_rank"]), _scalar(frame["to_rank"])
    return (f"translated a pointer outside rank {source}'s heap on its way to rank {target} "
            f"(offset {int(offsets[bad][0])} not in [0, {size}); {int(bad.sum())} of {bad.size} lanes bad). "
            "Pointers handed to iris must point into the symmetric heap: allocate the tensor with the "
            "context (ctx.zeros, ctx.empty, ...), not with torch, and check the pointer arithmetic.")
