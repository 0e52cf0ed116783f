"""Code that runs inside each rank for tests/test_gluon_host.py and tests/gpu/test_device_cuda.py: upstream's
``IrisGluon`` host class, every method its documentation lists, and a Gluon kernel launched with its context.

Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default, "cuda" under tests/gpu). A failed check raises in the
rank (the test shows its log); the summary returned is what can only be judged across ranks.
"""

from __future__ import annotations

import logging
import os

import iris.experimental.iris_gluon
import iris.iris_gluon as iris_gl
import numpy as np
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
BLOCK = 64


@gluon.jit
def ring_put_and_count(IrisDeviceCtx: gl.constexpr, context_tensor, src, dst, counter, BLOCK: gl.constexpr):
    """Put this rank's ``src`` into the right neighbour's ``dst``; count the ranks on rank 0's ``counter[0]``
    and, through upstream's older ``_translate``, ``counter[1]``."""
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK)  # no layout, as upstream's examples leave it: IrisDeviceCtx anchors it on a GPU
    ctx.put(src + offs, dst + offs, (ctx.cur_rank + 1) % ctx.num_ranks)
    ctx.atomic_add(counter, 1, 0, sem="release", scope="sys")
    # upstream's older IrisBackend._translate: rank 0's counter, reached by translating from this rank
    gl.atomic_add(ctx._translate(counter + 1, ctx.cur_rank, 0), 1, sem="release", scope="sys")


def _check(what, ok):
    if not ok:
        raise AssertionError(what)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _context_and_ranks(ctx):
    r, n = ctx.get_rank(), ctx.get_num_ranks()
    _check("iris_gl.iris returns an IrisGluon", type(ctx) is iris_gl.IrisGluon)
    context = ctx.get_device_context()
    _check("get_backend() is the device context tensor", ctx.get_backend() is context)
    _check(f"context on the {BACKEND} device", context.dtype == torch.int64 and context.device.type == BACKEND)
    bases = ctx.get_heap_bases()
    _check("heap bases: one per rank, as in the context", len(bases) == n
           and context[2:2 + n].cpu().tolist() == bases.cpu().tolist() and context[:2].cpu().tolist() == [r, n])
    _check("get_device() is the heap's torch.device", isinstance(ctx.get_device(), torch.device)
           and ctx.get_device().type == BACKEND)
    _check("get_cu_count() counts something", isinstance(ctx.get_cu_count(), int) and ctx.get_cu_count() > 0)
    ctx.barrier()
    ctx.barrier(None)
    ctx.barrier(group=None)


def _tensor_creation(ctx):
    r = ctx.get_rank()
    zeros, ones = ctx.zeros(2, 3, dtype=torch.float16), ctx.ones((4,), dtype=torch.int32)
    full = ctx.full((3,), r, dtype=torch.float32)
    like = ctx.zeros_like(full)
    _check("zeros/ones/full/zeros_like values", zeros.shape == (2, 3) and zeros.dtype == torch.float16
           and not zeros.any() and bool((ones == 1).all()) and full.cpu().tolist() == [float(r)] * 3
           and like.shape == full.shape and not like.any())
    _check("is_symmetric", all(ctx.is_symmetric(t) for t in (zeros, ones, full, like))
           and not ctx.is_symmetric(torch.zeros(3, device=ctx.get_device())))


def _broadcasts(ctx):
    r, n = ctx.get_rank(), ctx.get_num_ranks()
    last = n - 1
    sent = {"int": 42, "float": 3.25, "bool": True, "str": "Hello, Iris!", "dict": {"key": "value", "num": 42}}
    for what, value in sent.items():
        got = ctx.broadcast(value if r == 0 else None, src_rank=0)
        _check(f"broadcast {what}: {got!r}", got == value and type(got) is type(value))
    got = ctx.broadcast(None if r != last else 7)  # src_rank defaults to 0: rank 0's None
    _check("broadcast defaults to src_rank=0", got is None)
    for dtype in (torch.float32, torch.float16, torch.int32, torch.int64, torch.bfloat16):
        value = torch.arange(10, dtype=dtype, device=ctx.get_device()) if r == last else None
        got = ctx.broadcast(value, src_rank=last)
        _check(f"broadcast {dtype} from rank {last}: {got!r}", isinstance(got, np.ndarray)
               and np.array_equal(got, np.arange(10)))
    got = ctx.broadcast(np.ones((2, 3)) * r, src_rank=last)
    _check("broadcast a numpy array", isinstance(got, np.ndarray) and got.shape == (2, 3) and (got == last).all())
    try:
        ctx.broadcast(1, src_rank=n)
    except ValueError as error:
        _check("broadcast names the bad source rank", str(n) in str(error))
    else:
        raise AssertionError("broadcast from a rank outside the world was accepted")


def _logging(ctx):
    r = ctx.get_rank()
    logger, records = logging.getLogger("iris"), _Records()
    saved_level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        for log in (ctx.debug, ctx.info, ctx.warning, ctx.error):
            log(f"{log.__name__} from the IrisGluon test")
    finally:
        logger.removeHandler(records)
        logger.setLevel(saved_level)
    ours = [(rec.levelname, rec.getMessage(), rec.iris_rank) for rec in records.records if "IrisGluon test" in
            rec.getMessage()]
    _check(f"logging with the rank: {ours}", ours == [
        (level.upper(), f"{level} from the IrisGluon test", r) for level in ("debug", "info", "warning", "error")])


def _kernel_and_collective(ctx):
    r, n = ctx.get_rank(), ctx.get_num_ranks()
    src = ctx.full((BLOCK,), float(r + 1), dtype=torch.float32)
    dst, counter = ctx.zeros(BLOCK, dtype=torch.float32), ctx.zeros(2, dtype=torch.int32)
    ctx.barrier()
    ring_put_and_count[(1,)](iris_gl.IrisDeviceCtx, ctx.get_backend(), src, dst, counter, BLOCK, num_warps=1)
    ctx.barrier()
    _check(f"the left neighbour's put arrived: {dst.cpu().tolist()[:4]}", bool((dst == (r - 1) % n + 1).all()))
    if r == 0:
        _check(f"every rank counted once on rank 0, twice over: {counter.tolist()}", counter.tolist() == [n, n])
    _check("IrisGluon.CCL is the class of ctx.ccl, with upstream's collectives", isinstance(ctx.ccl, ctx.CCL)
           and all(callable(getattr(ctx.ccl, name)) for name in ("all_to_all", "all_gather", "reduce_scatter")))
    gathered = ctx.zeros(n * 4, dtype=torch.float32)
    ctx.ccl.all_gather(gathered, src[:4])
    _check(f"ccl.all_gather through IrisGluon: {gathered.cpu().tolist()}",
           gathered.cpu().tolist() == [float(k + 1) for k in range(n) for _ in range(4)])
    ctx.barrier()


def every_documented_method():
    """Upstream's documented IrisGluon methods, on ``iris.iris_gluon.iris(...)``; returns what ranks saw."""
    _check("both module paths give the same factory and class",
           iris.experimental.iris_gluon.iris is iris_gl.iris and iris.experimental.iris_gluon.IrisGluon is
           iris_gl.IrisGluon and iris.experimental.iris_gluon.IrisDeviceCtx is iris_gl.IrisDeviceCtx)
    ctx = iris_gl.iris("8MiB", backend=BACKEND)
    _context_and_ranks(ctx)
    _tensor_creation(ctx)
    _broadcasts(ctx)
    _logging(ctx)
    _kernel_and_collective(ctx)
    return {"rank": ctx.get_rank(), "world": ctx.get_num_ranks(), "bases": ctx.get_heap_bases().cpu().tolist(),
            "seed": ctx.broadcast(1234 + ctx.get_rank(), src_rank=1)}
