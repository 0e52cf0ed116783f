"""Randomized differential cases for the collectives (``iris.ccl``, ``ctx.ccl``) and the fused ops (``ctx.ops``),
run inside each rank by tests/test_ccl_diff.py (CPU) and tests/gpu/test_ccl_diff_cuda.py (one rank per GPU).

A case is drawn from ``random.Random(f"{seed}:{world}:{number}")`` alone, so case ``number`` of a seed and world
size is the same case whether it runs among thousands or alone (``IRIS_DIFF_CASE=world:number``). Kinds:

* ``sequence``: one to three collective calls in a row (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
  reduce, gather, scatter, sendrecv around a ring or to a drawn peer, barrier), each with a random shape (odd, 0-d,
  empty), dtype, :class:`iris.ccl.Config` (every variant, block sizes, programs, warps, tiles), root, route
  (``ctx.ccl`` or the function with its workspace passed back), in place or not, async or not, and repeated with new
  inputs in the same tensors (the second call takes :mod:`iris.ccl.fast_path`'s replay);
* ``ops``: one ``ctx.ops`` op on every path (sequential, chunked with random pieces and growth, auto, a named
  all-reduce variant), with and without a bias that differs between ranks, out on the heap or not, called twice;
* ``refusal``: what must be refused (a reduction of an integer dtype, an op other than SUM), refused alike everywhere.

The reference is torch: every rank's inputs are exchanged through torch.distributed on gloo and each result is
computed from them with torch (sums in float32 in rank order, as the one_shot and two_shot kernels add, so those
match bit for bit; ring rounds per hop and atomic adds in any order: within a tolerance unless the values are
small integers, which every order sums exactly). The ops take small integers, so every path matches torch bit for
bit (the sign of a zero aside: see :func:`exactly_equal`). A rank records each mismatch (case number, what,
how) and goes on; the test prints them.
"""

from __future__ import annotations

import os
import random
import sys
import time
import traceback

import torch
import torch.distributed as dist

import iris
from iris.ccl import (
    ALL_GATHER_VARIANTS,
    ALL_REDUCE_VARIANTS,
    ALL_TO_ALL_VARIANTS,
    BROADCAST_VARIANTS,
    REDUCE_VARIANTS,
    Config,
    ReduceOp,
    owned_range,
)
from iris.ccl.all_reduce import IN_PLACE_VARIANTS
from iris.ccl.config import REDUCE_SCATTER_VARIANTS, UPSTREAM_ALL_GATHER_VARIANTS
from iris.ops import FusedConfig
from iris.ops.all_gather_matmul_hbm_buffer import all_gather_matmul_hbm_buffer

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
REDUCE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MOVE_DTYPES = REDUCE_DTYPES + (torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                               torch.bool)
OPS = ("matmul_all_reduce", "matmul_all_gather", "all_gather_matmul", "matmul_reduce_scatter",
       "all_gather_matmul_hbm_buffer")
BLOCKS = (16, 32, 64, 128, 256, 1024, 4096)
MAX_STEPS = 12  # most blocks (or tiles) a drawn config cuts a tensor into
# Past 4 MiB (one_shot's and push's limit) for 4-byte dtypes, so that the size rule picks another algorithm: on GPUs
# only, where it takes milliseconds; the interpreter would take a minute, so there the case is a smaller one.
LARGE = (1 << 20) + 17 if BACKEND == "cuda" else 4517
SENTINEL = 77  # what reduce_scatter must leave outside this rank's chunk, and a rooted collective a leaf's output
ROOTED = ("broadcast", "reduce", "gather", "scatter")
P2P_NUMEL = max(LARGE, 4500, 40 * 70)  # the largest message a drawn shape makes
EVERY = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
REFUSALS = {"integer_reduce": ("all_reduce", "reduce_scatter"), "product": ("all_reduce", "reduce_scatter"),
            "non_contiguous": EVERY, "off_heap": EVERY, "ring_in_place": ("all_reduce",)}


# -------------------------------------------------------------------------------------------- the run's cases

def run_seed() -> int:
    """The run's seed: ``IRIS_DIFF_SEED``, else a fresh one (the tests print it)."""
    return int(os.environ.get("IRIS_DIFF_SEED") or random.SystemRandom().randrange(1 << 31))


def case_numbers(world: int, default_count: int) -> list[int]:
    """The case numbers to run on ``world`` ranks: ``IRIS_DIFF_CASE=<world>:<number>`` alone (none for another
    world size), else the first ``IRIS_DIFF_COUNT`` (``default_count`` when unset)."""
    only = os.environ.get("IRIS_DIFF_CASE")
    if only:
        only_world, number = (int(part) for part in only.split(":"))
        return [number] if only_world == world else []
    return list(range(int(os.environ.get("IRIS_DIFF_COUNT") or default_count)))


# -------------------------------------------------------------------------------------------- drawing cases

def draw_case(seed: int, world: int, number: int) -> dict:
    """Case ``number`` of ``seed`` on ``world`` ranks: a dict of plain values (JSON), the same on every rank.

    Examples
    --------
    >>> draw_case(1, 2, 0) == draw_case(1, 2, 0)
    True
    """
    rng = random.Random(f"{seed}:{world}:{number}")
    kind = rng.choices(("sequence", "ops", "refusal"), weights=(76, 20, 4))[0]
    if kind == "ops":
        return {"number": number, "kind": kind, **_draw_op(rng, world)}
    if kind == "refusal":
        what = rng.choice(tuple(REFUSALS))
        return {"number": number, "kind": kind, "what": what, "collective": rng.choice(REFUSALS[what])}
    calls = [_draw_call(rng, world) for _ in range(rng.choice((1, 1, 2, 3)))]
    return {"number": number, "kind": kind, "calls": calls}


def _draw_shape(rng, collective: str, world: int) -> list:
    if collective == "all_to_all":
        return [rng.choice((0, 1, 3, 7, 33, 65)), world * rng.choice((0, 1, 5, 16, 17, 40))]
    form = rng.choices(("flat", "matrix", "scalar", "empty", "large"), weights=(40, 44, 5, 10, 1))[0]
    if form == "scalar" and collective not in ("all_gather", "broadcast", "sendrecv"):
        form = "flat"  # all_gather of a 0-d input is tested; the reductions' 0-d shape is the flat 1-element one
    if form == "scalar":
        return []
    if form == "empty":
        return rng.choice(([0], [0, 5], [3, 0]))
    if form == "large":
        return [LARGE]
    if form == "flat":
        return [rng.choice((1, 15, 16, 17, 100, 255, 1000, 1023, 1025, 2049, 4500))]
    return [rng.randint(1, 40), rng.randint(1, 70)]


def _draw_config(rng, collective: str, shape: list, world: int) -> dict | None:
    """A Config for ``shape``; its blocks or tiles are drawn among those that cut the tensor into at most
    MAX_STEPS pieces, since the interpreter's cost is per step."""
    if rng.random() < 0.25:
        return None
    config = {}
    numel = 1
    for size in shape:
        numel *= size
    blocks = [b for b in BLOCKS if -(-numel // b) <= MAX_STEPS]
    if blocks and rng.random() < 0.7:
        config["block_size"] = rng.choice(blocks)
    if rng.random() < 0.5:
        config["comm_sms"] = rng.choice((1, 2, 3))
    if rng.random() < 0.3:
        config["num_warps"] = rng.choice((1, 2, 4, 8))
    if rng.random() < 0.2:  # upstream's knobs for its tiled AMD kernels: accepted, and must change nothing
        config.update(num_stages=rng.choice((1, 2, 3)), swizzle_size=rng.choice((1, 6, 8)),
                      num_xcds=rng.choice((None, 1, 8)), threads_per_warp=rng.choice((32, 64)),
                      waves_per_eu=rng.choice((0, 2)), all_reduce_distribution=rng.choice((0, 1)))
    if collective == "all_reduce":
        config["all_reduce_variant"] = rng.choice((None, *ALL_REDUCE_VARIANTS))
    elif collective == "all_gather":
        config["all_gather_variant"] = rng.choice((None, *ALL_GATHER_VARIANTS, *UPSTREAM_ALL_GATHER_VARIANTS))
    elif collective == "reduce_scatter":
        config["reduce_scatter_variant"] = rng.choice((None, *REDUCE_SCATTER_VARIANTS))
    elif collective == "all_to_all":
        m, n = shape[0], shape[1] // world
        tiles = [(bm, bn) for bm in (1, 2, 4, 16, 32) for bn in (1, 4, 16, 64)
                 if -(-m // bm) * -(-n // bn) <= MAX_STEPS]
        config["block_size_m"], config["block_size_n"] = rng.choice(tiles)
        config["all_to_all_variant"] = rng.choice((None, *ALL_TO_ALL_VARIANTS))
    elif collective in ("broadcast", "gather", "scatter"):
        config["broadcast_variant"] = rng.choice((None, *BROADCAST_VARIANTS))
    elif collective == "reduce":
        config["reduce_variant"] = rng.choice((None, *REDUCE_VARIANTS))
    return config


def _draw_call(rng, world: int) -> dict:
    collective = rng.choices(("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                              "gather", "scatter", "sendrecv", "barrier"),
                             weights=(28, 18, 12, 12, 8, 8, 6, 6, 8, 8))[0]
    if collective == "barrier":
        return {"collective": "barrier", "route": rng.choice(("ccl", "function", "device_barrier"))}
    reduce = collective in ("all_reduce", "reduce_scatter", "reduce")
    shape = _draw_shape(rng, collective, world)
    if collective == "sendrecv":  # to the next rank (a ring) or a drawn distance away
        return {"collective": collective, "shape": shape, "values": rng.choice(("ints", "randn")),
                "dtype": str(rng.choice(MOVE_DTYPES)).removeprefix("torch."), "route": rng.choice(("ccl", "function")),
                "step": rng.choice((1, rng.randrange(1, world))), "on_heap": rng.random() < 0.5,
                "repeat": rng.choice((1, 1, 2, 3)), "async_op": rng.random() < 0.5, "in_place": False}
    config = _draw_config(rng, collective, shape, world)
    variant = (config or {}).get("all_reduce_variant")
    in_place = {"all_to_all": False, "gather": False, "scatter": False}.get(collective, True)
    return {
        "collective": collective,
        "shape": shape,
        "dtype": str(rng.choice(REDUCE_DTYPES if reduce else MOVE_DTYPES)).removeprefix("torch."),
        "values": rng.choice(("ints", "randn")),
        "config": config,
        "route": rng.choice(("ccl", "function")),
        "in_place": in_place and variant in (None, *IN_PLACE_VARIANTS) and rng.random() < 0.3,
        "async_op": rng.random() < 0.25,
        "repeat": rng.choice((1, 1, 2)),
        "root": rng.randrange(world) if collective in ROOTED else None,
        "root_word": rng.choice(("dst", "root")) if collective == "reduce" else None,
    }


def _draw_op(rng, world: int) -> dict:
    op = rng.choice(OPS)
    m, k, n = rng.randint(1, 9), rng.randint(1, 8), rng.randint(1, 7)
    if op == "matmul_reduce_scatter":
        n = world * rng.randint(1, 3)
    return {"op": op, "m": m, "k": k, "n": n, "dtype": rng.choice(("float32", "float16", "bfloat16")),
            "bias": rng.choice(("none", "every_rank", "every_rank", "rank_0")), "out_on_heap": rng.random() < 0.5,
            "a_on_heap": rng.random() < 0.5,
            "b_transposed": rng.random() < 0.3, "chunks": rng.choice((None, 1, 2, 3)),
            "growth": rng.choice((None, 0.5, 1.0, 2.0)),
            "all_reduce_variant": rng.choice(ALL_REDUCE_VARIANTS)}


# -------------------------------------------------------------------------------------------- running cases

class Runner:
    """One rank's view: the context, a gloo group for the references, and the mismatches found so far."""

    def __init__(self, heap: str):
        self.ctx = iris.iris(heap, backend=BACKEND)
        self.rank, self.world = self.ctx.cur_rank, self.ctx.num_ranks
        self.device = self.ctx.get_device()
        self.gloo = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        self.failures: list[dict] = []
        self.ctx.ccl.init_p2p(max_numel=P2P_NUMEL, dtype=torch.float64)  # sends and receives use it by default

    # -- references through torch.distributed
    def gathered(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``tensor`` (same shape and dtype everywhere), exchanged as bytes over gloo (which has
        no int16), in rank order, on the CPU."""
        local = tensor.detach().cpu().contiguous()
        raw = local.reshape(-1).view(torch.uint8)
        out = torch.empty(self.world * raw.numel(), dtype=torch.uint8)
        dist.all_gather_into_tensor(out, raw, group=self.gloo)
        return [chunk.view(local.dtype).reshape(local.shape) for chunk in out.chunk(self.world)] if raw.numel() \
            else [local.clone() for _ in range(self.world)]

    def torch_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """torch.distributed's all_reduce (gloo, float64) of ``tensor``."""
        total = tensor.detach().cpu().double().contiguous()
        dist.all_reduce(total, group=self.gloo)
        return total

    def fail(self, number: int, what: str, detail: str) -> None:
        self.failures.append({"case": number, "rank": self.rank, "what": what, "detail": detail[-1500:]})

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def values(kind: str, shape, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """Random inputs: small integers (exact in every dtype and summation order) or normal values."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if kind == "ints" or not dtype.is_floating_point:
        low, high = (0, 100) if dtype == torch.uint8 else (-50, 50) if dtype == torch.int8 else (-8, 9)
        return torch.randint(low, high, shape, generator=generator).to(dtype)
    return torch.randn(shape, generator=generator).to(dtype)


def rank_order_sum(inputs: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """float32 sum in rank order, rounded to ``dtype``: the one_shot and two_shot kernels' exact bits."""
    total = torch.zeros(inputs[0].shape, dtype=torch.float32)
    for x in inputs:
        total = total + x.float()
    return total.to(dtype)


def tolerance(dtype: torch.dtype, world: int) -> tuple[float, float]:
    return {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3 * world, 2e-3),
            torch.bfloat16: (2e-2 * world, 2e-2)}[dtype]


def compare(runner, number: int, what: str, got: torch.Tensor, want: torch.Tensor, exact: bool,
            dtype: torch.dtype | None = None) -> None:
    got, want = got.detach().cpu(), want.detach().cpu()  # a reference may live on the GPU (A's copy)
    if tuple(got.shape) != tuple(want.shape):
        runner.fail(number, what, f"shape {list(got.shape)} != {list(want.shape)}")
        return
    if exact:
        if got.dtype != want.dtype:
            runner.fail(number, what, f"dtype {got.dtype} != {want.dtype}")
            return
        if not exactly_equal(got, want):
            diff = (got.double() - want.double()).abs() if got.numel() else torch.zeros(0)
            where = int(diff.flatten().argmax()) if diff.numel() else -1
            runner.fail(number, what, f"not bit-exact: {int((diff > 0).sum()) if diff.numel() else 0} of "
                        f"{got.numel()} differ; first worst at flat {where}: got "
                        f"{got.flatten()[where].item() if where >= 0 else None}, want "
                        f"{want.flatten()[where].item() if where >= 0 else None}")
        return
    atol, rtol = tolerance(dtype, runner.world)
    if not torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol):
        worst = (got.double() - want.double()).abs().max().item()
        runner.fail(number, what, f"max error {worst} over atol={atol}, rtol={rtol}")


def exactly_equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bit for bit, but for the sign of a zero: which sign a sum of zeros gets (``-2 * 0 + -1 * 0`` is -0.0)
    depends on the order and the initial value of an accumulation, which no backend promises."""
    if got.dtype.is_floating_point:
        return torch.equal(got, want) or torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(
            torch.uint8)) if got.numel() else True
    return torch.equal(got, want)


def run_case(runner: Runner, case: dict) -> None:
    number = case["number"]
    if case["kind"] == "sequence":
        run_sequence(runner, number, case["calls"])
    elif case["kind"] == "ops":
        run_op(runner, number, case)
    else:
        run_refusal(runner, number, case)


# -- collectives

def _generator(number: int, index: int, rank: int, repeat: int) -> torch.Generator:
    return torch.Generator().manual_seed(((number * 8 + index) * 8 + repeat) * 64 + rank)


def _call(runner, call: dict, out, inp, workspaces: dict, index: int):
    """One collective call by its route; returns what the call returned (a workspace)."""
    ctx, collective = runner.ctx, call["collective"]
    if collective == "sendrecv":
        return _sendrecv(runner, call, out, inp)
    config = Config(**call["config"]) if call["config"] is not None else None
    kwargs = dict(async_op=call["async_op"], config=config)
    if collective in ROOTED:
        word = call["root_word"] or ("src" if collective in ("broadcast", "scatter") else "dst")
        kwargs[word] = call["root"]
        tensors = (out,) if call["in_place"] and collective in ("broadcast", "reduce") else (out, inp)
        if call["route"] == "ccl":
            return getattr(ctx.ccl, collective)(*tensors, **kwargs)
        if collective in ("broadcast", "reduce"):
            workspace = getattr(iris.ccl, collective)(*tensors, ctx=ctx, workspace=workspaces.get(index), **kwargs)
        else:
            workspace = getattr(iris.ccl, collective)(out, inp, ctx, workspace=workspaces.get(index), **kwargs)
        workspaces[index] = workspace
        return workspace
    if call["route"] == "ccl":
        return getattr(ctx.ccl, collective)(out, inp, **kwargs)
    workspace = getattr(iris.ccl, collective)(out, inp, ctx, workspace=workspaces.get(index), **kwargs)
    workspaces[index] = workspace
    return workspace


def _sendrecv(runner, call: dict, out, inp):
    """Send ``inp`` ``step`` ranks ahead, receive ``out`` from as far behind (async: the works waited for)."""
    ctx, rank, world = runner.ctx, runner.rank, runner.world
    dst, src = (rank + call["step"]) % world, (rank - call["step"]) % world
    if call["route"] == "ccl" and not call["async_op"]:
        ctx.ccl.sendrecv(inp, out, dst=dst, src=src)
    elif call["route"] == "ccl":
        works = [ctx.ccl.isend(inp, dst), ctx.ccl.irecv(out, src)]
        assert all(work.wait() for work in works)
    else:
        ops = [iris.ccl.P2POp(iris.ccl.irecv, out, src), iris.ccl.P2POp(iris.ccl.isend, inp, dst)]
        for work in ctx.ccl.batch_isend_irecv(ops):
            work.wait()
    return None


def _expected(runner, call: dict, inputs: list[torch.Tensor], before: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(what this rank's output must hold, whether bit for bit)."""
    collective, dtype = call["collective"], inputs[0].dtype
    rank, world = runner.rank, runner.world
    root = call.get("root")
    if collective == "sendrecv":
        return inputs[(rank - call["step"]) % world], True
    if collective == "broadcast":
        return inputs[root], True
    if collective == "scatter":
        return inputs[root].reshape(world, -1)[rank].reshape(before.shape), True
    if collective == "gather":
        if rank != root:
            return before, True
        return torch.cat([x.reshape(1, *x.shape) if x.dim() == 0 else x for x in inputs]), True
    if collective == "reduce":
        return (rank_order_sum(inputs, dtype) if rank == root else inputs[rank] if call["in_place"] else before), True
    if collective == "all_gather":
        return torch.cat([x.reshape(1, *x.shape) if x.dim() == 0 else x for x in inputs]), True
    if collective == "all_to_all":
        n = inputs[0].shape[1] // world
        return torch.cat([x[:, rank * n:(rank + 1) * n] for x in inputs], dim=1), True
    variant = (call["config"] or {}).get("all_reduce_variant")
    if collective == "all_reduce":
        chosen = variant or iris.ccl.choose_variant(inputs[0].numel() * inputs[0].element_size(), world)
        exact = chosen in ("one_shot", "two_shot") or call["values"] == "ints"
        return rank_order_sum(inputs, dtype), exact
    want = before.clone().reshape(-1)  # reduce_scatter: this rank's chunk only
    lo, hi = owned_range(inputs[0].numel(), rank, world)
    want[lo:hi] = rank_order_sum([x.reshape(-1)[lo:hi] for x in inputs], dtype)
    return want.reshape(before.shape), True


def _allocate(runner, call: dict):
    """(out, inp) on the heap for ``call``; in place: the input is the output (all_gather: this rank's slice)."""
    ctx, shape, dtype = runner.ctx, tuple(call["shape"]), getattr(torch, call["dtype"])
    rows = (runner.world * shape[0], *shape[1:]) if shape else (runner.world,)
    if call["collective"] == "sendrecv":  # on the heap or not: either may be sent and received
        make = ctx.zeros if call["on_heap"] else (lambda *size, dtype: torch.zeros(*size, dtype=dtype,
                                                                                  device=runner.device))
        return make(shape, dtype=dtype), make(shape, dtype=dtype)
    if call["collective"] == "gather":
        return ctx.zeros(rows, dtype=dtype), ctx.zeros(shape, dtype=dtype)
    if call["collective"] == "scatter":
        return ctx.zeros(shape, dtype=dtype), ctx.zeros(rows, dtype=dtype)
    if call["collective"] == "all_gather":
        out_shape = (runner.world * shape[0], *shape[1:]) if shape else (runner.world,)
        out = ctx.zeros(out_shape, dtype=dtype)
        if call["in_place"]:
            m = shape[0] if shape else 1
            inp = out[runner.rank * m:(runner.rank + 1) * m].reshape(shape)
        else:
            inp = ctx.zeros(shape, dtype=dtype)
        return out, inp
    inp = ctx.zeros(shape, dtype=dtype)
    return (inp if call["in_place"] else ctx.zeros(shape, dtype=dtype)), inp


def run_sequence(runner: Runner, number: int, calls: list[dict]) -> None:
    """Every call of the sequence in a row (async ones waited for before the next), each repeated with new inputs
    in the same tensors; every result checked against torch."""
    rank = runner.rank
    workspaces: dict = {}
    for index, call in enumerate(calls):
        if call["collective"] == "barrier":
            run_barrier(runner, number, index, call, workspaces)
            continue
        out, inp = _allocate(runner, call)
        dtype = inp.dtype
        for repeat in range(call["repeat"]):
            runner.sync()
            fresh = values(call["values"], tuple(inp.shape), dtype, _generator(number, index, rank, repeat))
            if call["collective"] in ("reduce_scatter", "gather", "reduce", "sendrecv") and not call["in_place"]:
                out.fill_(SENTINEL)
            inp.copy_(fresh.to(runner.device))
            runner.sync()
            before = out.detach().cpu().clone()
            inputs = runner.gathered(fresh)
            where = f"call {index} ({call['collective']}) repeat {repeat}"
            workspace = _call(runner, call, out, inp, workspaces, index)
            if call["async_op"] and workspace is not None:
                workspace.wait()
            runner.sync()
            want, exact = _expected(runner, call, inputs, before)
            compare(runner, number, where, out, want, exact, dtype)
            if call["collective"] == "all_reduce" and not exact:
                compare(runner, number, where + " against torch.distributed's all_reduce",
                        out, runner.torch_sum(fresh).to(dtype), False, dtype)
            if not call["in_place"]:
                compare(runner, number, where + ": input left intact", inp, fresh, True)


def run_barrier(runner: Runner, number: int, index: int, call: dict, workspaces: dict) -> None:
    """Each rank writes its value into its heap, a device barrier, then reads every peer's: all there."""
    ctx, rank, world = runner.ctx, runner.rank, runner.world
    mine = ctx.zeros(world, dtype=torch.int32)
    runner.sync()
    value = torch.arange(world, dtype=torch.int32) + 1000 * (rank + 1) + number
    mine.copy_(value.to(runner.device))
    if call["route"] == "ccl":
        ctx.ccl.barrier()
    elif call["route"] == "function":
        workspaces[index] = iris.ccl.device_barrier(ctx, workspace=workspaces.get(index))
    else:
        ctx.device_barrier()
    runner.sync()
    for peer in range(world):
        seen = ctx.as_remote(mine, peer).cpu()
        compare(runner, number, f"call {index} (barrier, {call['route']}): rank {peer}'s values", seen,
                torch.arange(world, dtype=torch.int32) + 1000 * (peer + 1) + number, True)
    dist.barrier(group=runner.gloo)  # nobody frees ``mine`` while a peer still reads it


# -- refusals

def run_refusal(runner: Runner, number: int, case: dict) -> None:
    """What must be refused is refused on every rank, with an error that names the rank."""
    ctx, what, world = runner.ctx, case["what"], runner.world
    collective = getattr(ctx.ccl, case["collective"])
    out_rows = world if case["collective"] == "all_gather" else 1
    expected = ValueError
    if what == "integer_reduce":
        inp = ctx.zeros(33, dtype=torch.int32)
        call = lambda: collective(ctx.zeros_like(inp), inp)
    elif what == "product":
        inp = ctx.zeros(33)
        expected, call = NotImplementedError, lambda: collective(ctx.zeros_like(inp), inp, op=ReduceOp.PRODUCT)
    elif what == "non_contiguous":
        inp = ctx.zeros(4 * world, 6).t()
        call = lambda: collective(ctx.zeros(out_rows * 6, 4 * world), inp)
    elif what == "off_heap":
        inp = torch.zeros(4, 2 * world, device=runner.device)
        call = lambda: collective(ctx.zeros(out_rows * 4, 2 * world), inp)
    else:
        inp = ctx.zeros(33)
        call = lambda: collective(inp, inp, config=Config(all_reduce_variant="ring"))
    try:
        call()
    except expected as error:
        if f"rank {runner.rank}" not in str(error):
            runner.fail(number, f"{case['collective']} {case['what']}", f"the error does not name the rank: {error}")
        return
    runner.fail(number, f"{case['collective']} {case['what']}", f"expected {expected.__name__}, nothing raised")


# -- ctx.ops

def _op_inputs(runner, case: dict, rank: int):
    """Rank ``rank``'s (A, B, bias) of an ops case: small integers, exact in every dtype and order."""
    dtype, world = getattr(torch, case["dtype"]), runner.world
    g = torch.Generator().manual_seed(case["number"] * 64 + rank)
    m, k, n = case["m"], case["k"], case["n"]
    gathers_a = case["op"] in ("all_gather_matmul", "all_gather_matmul_hbm_buffer")  # A is this rank's shard of K
    b_shape = (world * k, n) if gathers_a else (k, n)
    A = torch.randint(-2, 3, (m, k), generator=g).to(dtype)
    B = torch.randint(-2, 3, b_shape, generator=g).to(dtype)
    bias_len = m if case["op"] == "all_gather_matmul_hbm_buffer" else n
    bias = torch.randint(-2, 3, (bias_len,), generator=g).to(dtype) + 3 * rank  # differs between ranks
    return A, B, bias


def _op_reference(runner, case: dict, gathered) -> torch.Tensor:
    """What this rank's ``out`` holds, from every rank's inputs (float64, exact for these integers)."""
    op, rank, world = case["op"], runner.rank, runner.world
    As, Bs, biases = ([x.double() for x in xs] for xs in gathered)
    zero = [torch.zeros_like(b) for b in biases]
    bias = [c if passes_bias(case, r) else z for r, (c, z) in enumerate(zip(biases, zero, strict=True))]
    if op == "matmul_all_reduce":
        return sum(a @ b + c for a, b, c in zip(As, Bs, bias, strict=True))
    if op == "matmul_reduce_scatter":
        n_local = case["n"] // world
        return sum(a @ b + c for a, b, c in zip(As, Bs, bias, strict=True))[:, rank * n_local:(rank + 1) * n_local]
    if op == "matmul_all_gather":
        return torch.cat([a @ b + c for a, b, c in zip(As, Bs, bias, strict=True)])
    product = torch.cat(As, dim=1) @ Bs[rank]
    return product + (bias[rank][:, None] if op == "all_gather_matmul_hbm_buffer" else bias[rank])


def passes_bias(case: dict, rank: int) -> bool:
    """Whether ``rank`` passes a bias: none does, every rank does (each its own), or rank 0 alone (the way to add
    one bias once, since every rank's bias goes into the sum)."""
    return case["bias"] == "every_rank" or (case["bias"] == "rank_0" and rank == 0)


def _op_paths(case: dict) -> list[tuple[str, FusedConfig]]:
    chunked = FusedConfig(variant="chunked", chunks=case["chunks"], growth=case["growth"])
    if case["op"] == "all_gather_matmul_hbm_buffer":
        return [("chunked", chunked), ("auto", FusedConfig(chunks=case["chunks"]))]
    paths = [("sequential", FusedConfig(variant="sequential")), ("chunked", chunked), ("auto", FusedConfig())]
    if case["op"] == "matmul_all_reduce":
        paths.append((f"all_reduce_variant={case['all_reduce_variant']}",
                      FusedConfig(all_reduce_variant=case["all_reduce_variant"])))
    if case["op"] == "matmul_reduce_scatter":
        paths.append(("peers_first", FusedConfig(variant="peers_first")))
    return paths


def run_op(runner: Runner, number: int, case: dict) -> None:
    """The op on every path, called twice each (the second reuses the workspace, a CUDA graph on GPUs): every
    result equal to torch's bit for bit (small integers), so also to every other path's."""
    ctx, rank, world, device = runner.ctx, runner.rank, runner.world, runner.device
    op, dtype, m, n = case["op"], getattr(torch, case["dtype"]), case["m"], case["n"]
    A, B, bias = _op_inputs(runner, case, rank)
    gathered = [runner.gathered(A), runner.gathered(B), runner.gathered(bias)]
    want = _op_reference(runner, case, gathered).to(dtype)
    if case["a_on_heap"]:
        A = ctx.zeros(A.shape, dtype=dtype).copy_(A.to(device))
    else:
        A = A.to(device)
    # A weight is often stored transposed: B then is a non-contiguous view, as ``weight.T`` is.
    B = B.t().contiguous().to(device).t() if case["b_transposed"] else B.to(device)
    bias = bias.to(device)
    out_shape = {"matmul_all_gather": (world * m, n), "matmul_reduce_scatter": (m, n // world)}.get(op, (m, n))
    A_copy = A.clone()
    for path, config in _op_paths(case):
        out = (ctx.zeros if case["out_on_heap"] else torch.zeros)(out_shape, dtype=dtype, device=device)
        for call in range(2):
            out.fill_(SENTINEL)
            own_bias = bias if passes_bias(case, rank) else None
            if op == "all_gather_matmul_hbm_buffer":
                workspace = all_gather_matmul_hbm_buffer(ctx, out, A, B, bias=own_bias, config=config)
            else:
                workspace = getattr(ctx.ops, op)(out, A, B, bias=own_bias, config=config)
            runner.sync()
            compare(runner, number, f"{op} path {path} (took {workspace.path}) call {call} "
                    f"bias={case['bias']}", out, want, True)
    compare(runner, number, f"{op}: A left intact", A, A_copy, True)


# -------------------------------------------------------------------------------------------- entry point

def run_cases(seed: int, numbers: list[int], heap: str | None = None) -> dict:
    """Run cases ``numbers`` of ``seed`` on this rank; return ``{"checked": n, "failures": [...]}``.

    An exception in a case is a failure of that case (with its traceback); the ranks then meet at a gloo barrier
    and go on. Each case's number is printed before it runs, so a hang's log names the case.
    """
    runner = Runner(heap or ("1GiB" if BACKEND == "cuda" else "64MiB"))
    for number in numbers:
        case = draw_case(seed, runner.world, number)
        print(f"case {runner.world}:{number} {case}", flush=True)
        start = time.perf_counter()
        try:
            run_case(runner, case)
        except Exception as error:  # a case's crash is its finding; the others still run
            runner.fail(number, f"{case['kind']} raised {type(error).__name__}",
                        f"{error}\n{traceback.format_exc()}")
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        dist.barrier(group=runner.gloo)
        print(f"case {runner.world}:{number} took {time.perf_counter() - start:.3f} s", flush=True)
    runner.ctx.barrier()
    return {"checked": len(numbers), "failures": runner.failures}


def issue_bias_example() -> dict:
    """issue 31's example: A = [[1], [1]], B = [[1]], bias 10 on rank 0 and 100 on rank 1: out on every path."""
    ctx = iris.iris("16MiB", backend=BACKEND)
    device, results = ctx.get_device(), {}
    A, B = torch.ones(2, 1, device=device), torch.ones(1, 1, device=device)
    bias = torch.full((1,), 10.0 if ctx.cur_rank == 0 else 100.0, device=device)
    for name, config in (("sequential", FusedConfig(variant="sequential")), ("chunked", FusedConfig(variant="chunked")),
                         ("auto", FusedConfig()), ("one_shot", FusedConfig(all_reduce_variant="one_shot"))):
        out = ctx.zeros(2, 1)
        ctx.ops.matmul_all_reduce(out, A, B, bias=bias, config=config)
        results[name] = out.cpu().tolist()
    ctx.barrier()
    return results


# Found by a random seed (1891036790, cases 2:5 then 2:46): a workspace warmed by a call without bias, then
# the same shapes with a bias on rank 0 alone. The workspace key held "a bias is passed", so rank 0 allocated a
# new workspace (collective) while rank 1 reused the warm one and waited at its device barrier: a hang.
WARM_WORKSPACE_THEN_ONE_RANK_BIAS = (
    {"number": 5, "kind": "ops", "op": "all_gather_matmul_hbm_buffer", "m": 1, "k": 3, "n": 1, "dtype": "bfloat16",
     "bias": "every_rank", "out_on_heap": False, "a_on_heap": True, "b_transposed": False, "chunks": 1,
     "growth": 1.0, "all_reduce_variant": "atomic"},
    {"number": 46, "kind": "ops", "op": "all_gather_matmul", "m": 1, "k": 3, "n": 1, "dtype": "bfloat16",
     "bias": "rank_0", "out_on_heap": False, "a_on_heap": True, "b_transposed": True, "chunks": None,
     "growth": None, "all_reduce_variant": "one_shot"},
    {"number": 47, "kind": "ops", "op": "matmul_all_reduce", "m": 2, "k": 3, "n": 2, "dtype": "float32",
     "bias": "none", "out_on_heap": True, "a_on_heap": False, "b_transposed": False, "chunks": 2,
     "growth": 1.0, "all_reduce_variant": "two_shot"},
    {"number": 48, "kind": "ops", "op": "matmul_all_reduce", "m": 2, "k": 3, "n": 2, "dtype": "float32",
     "bias": "rank_0", "out_on_heap": True, "a_on_heap": False, "b_transposed": False, "chunks": 2,
     "growth": 1.0, "all_reduce_variant": "two_shot"},
)


def warm_workspace_then_one_rank_bias() -> dict:
    """Run :data:`WARM_WORKSPACE_THEN_ONE_RANK_BIAS`'s cases in order on this rank (they hung in the second)."""
    runner = Runner("64MiB")
    for case in WARM_WORKSPACE_THEN_ONE_RANK_BIAS:
        run_case(runner, case)
    runner.ctx.barrier()
    return {"checked": len(WARM_WORKSPACE_THEN_ONE_RANK_BIAS), "failures": runner.failures}
