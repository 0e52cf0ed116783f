"""Kernels for tests/test_interpret.py, defined after the CPU interpreter is switched on.

``TRITON_INTERPRET`` is read when ``@triton.jit``/``@gluon.jit`` decorate, so this module activates
the interpreter before its first kernel, whichever test module imported it first.
"""

import iris.interpret

iris.interpret.activate()

import triton  # noqa: E402
import triton.language  # noqa: E402
import triton.language as tl  # noqa: E402
from iris.gluon import cta_barrier  # noqa: E402
from triton import language  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia import hopper  # noqa: E402
from triton.language import constexpr  # noqa: E402
from triton.language.core import _aggregate as aggregate  # noqa: E402

BLOCKED_1D = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[4], order=[0])

# ---------------------------------------------------------------- Gluon, element-wise and 2-D tiles


@gluon.jit
def scale_1d(x_ptr, y_ptr, n, factor, BLOCK: gl.constexpr):
    """y = x * factor, with a BlockedLayout range (masked tail) and a layout-less range."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    plain = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    gl.static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of 32")
    values = gl.load(x_ptr + plain, mask=plain < n, other=0.0)
    gl.store(y_ptr + offs, values * factor, mask=offs < n)


@gluon.jit
def row_col_stats(x_ptr, row_sum_ptr, col_max_ptr, scaled_ptr, row_prod_ptr,
                  M: gl.constexpr, N: gl.constexpr):
    """A 2-D tile addressed through SliceLayouts of a 2-D BlockedLayout, with reductions."""
    blocked: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, blocked))
    offs = gl.expand_dims(rows, 1) * N + gl.expand_dims(cols, 0)
    tile = gl.load(x_ptr + offs)
    gl.store(row_sum_ptr + rows, gl.sum(tile, axis=1))
    col_max = gl.convert_layout(gl.max(tile, axis=0), gl.SliceLayout(0, blocked))
    gl.store(col_max_ptr + cols, col_max)
    gl.store(row_prod_ptr + rows, gl.reduce(tile, 1, multiply))
    acc = gl.zeros([M, N], gl.float32, blocked)
    for step in gl.static_range(3):
        acc += gl.full_like(tile, step + 1)
    offset = gl.where(tile > 0, gl.zeros_like(tile), gl.full([M, N], -1.0, gl.float32, blocked))
    cta_barrier()
    gl.store(scaled_ptr + offs, tile * acc + offset)


@gluon.jit
def multiply(a, b):
    return a * b


@gluon.jit
def apply_helper(x_ptr, y_ptr, helper: gl.constexpr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    gl.store(y_ptr + offs, helper(gl.load(x_ptr + offs)))


@gluon.jit
def launch_facts(out_ptr, x_ptr, n):
    """Facts about the launch, written as int32: program ids, num_programs, num_warps, cdiv, casts."""
    auto = gl.set_auto_layout(gl.arange(0, 4), gl.CoalescedLayout())
    pid = gl.program_id(0)
    first = gl.load(x_ptr).to(gl.int32)
    ids = gl.where(auto == 0, pid, 0) + gl.where(auto == 1, gl.num_programs(0), 0)
    gl.store(out_ptr + pid * 4 + auto, ids, mask=auto < 2)
    gl.store(out_ptr + pid * 4 + 2, gl.num_warps() + gl.cdiv(n, 4) * 100)
    gl.store(out_ptr + pid * 4 + 3, first)


# ---------------------------------------------------------------- Gluon atomics


@gluon.jit
def atomics(counter_ptr, slots_ptr, lock_ptr, seen_ptr, values_ptr, BLOCK: gl.constexpr):
    """counter[0] += 1 per element; max/min/and/or/xor of all values; xchg into slots; a cas lock."""
    offs = gl.arange(0, BLOCK, layout=BLOCKED_1D)
    pid = gl.program_id(0)
    values = gl.load(values_ptr + pid * BLOCK + offs)
    one = gl.full([BLOCK], 1, gl.int32, BLOCKED_1D)
    everywhere = gl.zeros([BLOCK], gl.int32, BLOCKED_1D)
    gl.atomic_add(counter_ptr + everywhere, one, sem="relaxed", scope="sys")
    gl.atomic_max(counter_ptr + 1 + everywhere, values, sem="acq_rel", scope="gpu")
    gl.atomic_min(counter_ptr + 2 + everywhere, values)
    gl.atomic_and(counter_ptr + 3 + everywhere, values)
    gl.atomic_or(counter_ptr + 4 + everywhere, values)
    gl.atomic_xor(counter_ptr + 5 + everywhere, values)
    gl.atomic_xchg(slots_ptr + pid, pid + 10)
    # Exactly one program finds the lock free (0) and takes it.
    gl.store(seen_ptr + pid, gl.atomic_cas(lock_ptr, 0, pid + 100, sem="acquire", scope="sys"))


# ---------------------------------------------------------------- constexpr spellings


@triton.jit
def triton_spellings(out_ptr, A: tl.constexpr, B: triton.language.constexpr, C: constexpr,
                     D: gl.constexpr, E: language.constexpr):
    tl.store(out_ptr + tl.arange(0, A), tl.arange(0, A) * 0 + 1)
    tl.store(out_ptr + A + tl.arange(0, B), tl.arange(0, B) * 0 + 2)
    tl.store(out_ptr + A + B + tl.arange(0, C), tl.arange(0, C) * 0 + 3)
    tl.store(out_ptr + A + B + C + tl.arange(0, D), tl.arange(0, D) * 0 + 4)
    tl.store(out_ptr + A + B + C + D + tl.arange(0, E), tl.arange(0, E) * 0 + 5)


@gluon.jit
def gluon_spellings(out_ptr, A: tl.constexpr, B: triton.language.constexpr, C: constexpr,
                    D: gl.constexpr, E: language.constexpr):
    gl.store(out_ptr + gl.arange(0, A), gl.arange(0, A) * 0 + 1)
    gl.store(out_ptr + A + gl.arange(0, B), gl.arange(0, B) * 0 + 2)
    gl.store(out_ptr + A + B + gl.arange(0, C), gl.arange(0, C) * 0 + 3)
    gl.store(out_ptr + A + B + C + gl.arange(0, D), gl.arange(0, D) * 0 + 4)
    gl.store(out_ptr + A + B + C + D + gl.arange(0, E), gl.arange(0, E) * 0 + 5)


# ---------------------------------------------------------------- aggregates passed as constexpr classes
# A toy symmetric heap in one process: "rank r's heap" is heap r, heap_bases[r] its address, and
# a pointer into the caller's heap is translated with heap_bases[r] + (ptr - heap_bases[rank]).


@aggregate
class TritonRankContext:
    """Triton aggregate in the style of Iris's DeviceContext."""

    rank: tl.constexpr
    world_size: tl.constexpr
    heap_bases: tl.tensor
    scale: tl.tensor

    def __init__(self, rank, world_size, heap_bases, scale):
        self.rank = rank  # a plain int on the interpreter: stored as tl.constexpr
        self.world_size = world_size
        self.heap_bases = heap_bases
        self.scale = scale  # a Python float kernel argument on the interpreter: stored as a tensor

    @staticmethod
    @triton.jit
    def initialize(context_tensor, rank, world_size, scale=1.0):
        return TritonRankContext(rank, world_size, context_tensor + 2, scale)

    @triton.jit
    def as_remote(self, ptr, to_rank):
        base = tl.load(self.heap_bases + self.rank)
        remote_base = tl.load(self.heap_bases + to_rank)
        return (remote_base + (ptr.to(tl.uint64, bitcast=True) - base)).to(ptr.dtype, bitcast=True)

    @triton.jit
    def load(self, ptr, from_rank, mask=None, other=None):
        return tl.load(self.as_remote(ptr, from_rank), mask=mask, other=other)

    @triton.jit
    def scaled_load(self, ptr, from_rank, mask=None):
        return self.load(ptr, from_rank, mask=mask, other=0.0) * self.scale + self.world_size


@triton.jit
def triton_read_peer(Ctx: tl.constexpr, context_tensor, buf_ptr, out_ptr, scale, n,
                     rank: tl.constexpr, world_size: tl.constexpr, peer: tl.constexpr, BLOCK: tl.constexpr):
    ctx = Ctx.initialize(context_tensor, rank, world_size, scale=scale)
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, ctx.scaled_load(buf_ptr + offs, peer, mask=offs < n), mask=offs < n)


@aggregate
class GluonRankContext:
    """Gluon aggregate in the style of Iris's IrisDeviceCtx: rank and world read at run time."""

    cur_rank: gl.tensor
    num_ranks: gl.tensor
    heap_bases: gl.tensor

    def __init__(self, cur_rank, num_ranks, heap_bases):
        self.cur_rank = cur_rank
        self.num_ranks = num_ranks
        self.heap_bases = heap_bases

    @gluon.jit
    def initialize(context_tensor):  # constructor style without self, as upstream Iris writes it
        return GluonRankContext(gl.load(context_tensor), gl.load(context_tensor + 1), context_tensor + 2)

    @gluon.jit
    def as_remote(self, ptr, to_rank):
        base = gl.load(self.heap_bases + self.cur_rank)
        remote_base = gl.load(self.heap_bases + to_rank)
        return (remote_base + (ptr.to(gl.uint64, bitcast=True) - base)).to(ptr.dtype, bitcast=True)

    @gluon.jit
    def atomic_add(self, ptr, value, to_rank, mask=None, sem=None, scope=None):
        return gl.atomic_add(self.as_remote(ptr, to_rank), value, mask=mask, sem=sem, scope=scope)


@gluon.jit
def gluon_read_and_count(IrisDeviceCtx: gl.constexpr, context_tensor, buf_ptr, out_ptr, counter_ptr,
                         peer: gl.constexpr, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK)
    remote = ctx.as_remote(buf_ptr + offs, peer)
    gl.store(out_ptr + offs, gl.load(remote) + ctx.num_ranks.to(gl.float32))
    ctx.atomic_add(counter_ptr + offs * 0, gl.full([BLOCK], 1, gl.int32, BLOCKED_1D), peer, sem="relaxed")


# ---------------------------------------------------------------- not emulated: UnsupportedOnInterpreter


@gluon.jit
def uses_shared_memory(x_ptr, BLOCK: gl.constexpr):
    shared: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    smem = gl.allocate_shared_memory(gl.float32, [BLOCK], shared)
    smem.store(gl.load(x_ptr + gl.arange(0, BLOCK, layout=BLOCKED_1D)))


@gluon.jit
def idle_partition(x_ptr):
    pass


@gluon.jit
def uses_warp_specialize(x_ptr):
    gl.warp_specialize([(idle_partition, (x_ptr,)), (idle_partition, (x_ptr,))], [1], [24])


@gluon.jit
def uses_hopper_fence(x_ptr):
    hopper.fence_async_shared()


# ---------------------------------------------------------------- runtime scalars


@triton.jit
def fill_up_to(out_ptr, n):
    """out[k] = k for k < n, looping over the runtime scalar n (numpy >= 2.4 broke this on triton 3.6)."""
    for k in range(n):
        tl.store(out_ptr + k, k)


@triton.jit
def minimum_maximum(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    """out[0] = tl.minimum(x, y), out[1] = tl.maximum(x, y), out[2] = tl.minimum(x, y, propagate_nan=ALL)."""
    offs = tl.arange(0, BLOCK)
    x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, tl.minimum(x, y))
    tl.store(out_ptr + BLOCK + offs, tl.maximum(x, y))
    tl.store(out_ptr + 2 * BLOCK + offs, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL))


@triton.jit
def masked_load_with_other(src_ptr, other_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = src where the lane is below n, else the one value at other_ptr (a masked load's ``other``)."""
    lanes = tl.arange(0, BLOCK)
    tl.store(out_ptr + lanes, tl.load(src_ptr + lanes, mask=lanes < n, other=tl.load(other_ptr)))


# ---------------------------------------------------------------- iris atomics, on element types too


@triton.jit
def iris_atomic(target_ptr, heap_bases, OP: tl.constexpr):
    """One iris atomic ``OP`` (add, sub, xchg, xor, and, or, min, max or cas) at this rank's own ``target_ptr``."""
    value = tl.load(target_ptr)
    if OP == "add":
        iris.atomic_add(target_ptr, value, 0, 0, heap_bases)
    elif OP == "sub":
        iris.atomic_sub(target_ptr, value, 0, 0, heap_bases)
    elif OP == "xchg":
        iris.atomic_xchg(target_ptr, value, 0, 0, heap_bases)
    elif OP == "xor":
        iris.atomic_xor(target_ptr, value, 0, 0, heap_bases)
    elif OP == "and":
        iris.atomic_and(target_ptr, value, 0, 0, heap_bases)
    elif OP == "or":
        iris.atomic_or(target_ptr, value, 0, 0, heap_bases)
    elif OP == "min":
        iris.atomic_min(target_ptr, value, 0, 0, heap_bases)
    elif OP == "max":
        iris.atomic_max(target_ptr, value, 0, 0, heap_bases)
    else:
        iris.atomic_cas(target_ptr, value, value, 0, 0, heap_bases)


# ---------------------------------------------------------------- float atomic adds (iris.interpret.atomic_adds)


@triton.jit
def add_lane_by_lane(target_ptr, value_ptr, old_ptr, n, BLOCK: tl.constexpr, ONE_WORD: tl.constexpr = False):
    """Lane i < n adds value[i] into target[i] (into target[0] with ONE_WORD; tl.atomic_add) and keeps what it
    found."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    where = target_ptr + (offs * 0 if ONE_WORD else offs)
    found = tl.atomic_add(where, tl.load(value_ptr + offs, mask=mask), mask=mask, sem="relaxed")
    tl.store(old_ptr + offs, found, mask=mask)
