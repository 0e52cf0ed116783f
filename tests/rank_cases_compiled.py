"""Code that runs inside each rank for tests/test_compiled_collectives.py: ``torch.ops.iris``'s collectives
(:mod:`iris.distributed.compiled`, reached by upstream's path ``iris.compile.functional_collectives``), eagerly and
under ``torch.compile(fullgraph=True)``, against torch.distributed's functional collectives on gloo.

Inputs are seeded per rank and call; at 2 ranks a sum of two values rounds once whichever order adds them, so every
result is compared bit for bit. A failed check raises in the rank (the test shows its log).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import iris

from .rank_cases_ccl import _check_equal, _raises

fc = iris.compile.functional_collectives  # upstream's path of iris.distributed.compiled

# torch 2.13 renamed them (the old names warn); torch 2.11 has only the old
ALL_GATHER = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
REDUCE_SCATTER = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
SHAPE = (6, 37)  # 222 elements; reduce_scatter's block of 111 is not a multiple of the kernels' 16-element chunks


def _values(rank: int, call: int, shape, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7919 * call + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=generator, dtype=dtype)


def _gloo(result) -> torch.Tensor:
    return funcol.wait_tensor(result)  # torch's functional collectives return a tensor still to be waited for


def _recorder(graphs: list):
    """A torch.compile backend that keeps each graph dynamo made, then runs it through AOTAutograd (whose tracing
    runs the operators' fake rules and, for a backward, their gradient formulas)."""
    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return torch._dynamo.lookup_backend("aot_eager")(graph_module, example_inputs)
    return backend


def _iris_nodes(graph_module) -> list:
    # dynamo's graph holds the operator (torch.ops.iris.all_reduce), AOTAutograd's its overload (.default)
    return sorted({str(node.target).removesuffix(".default") for node in graph_module.graph.nodes
                   if node.op == "call_function" and str(node.target).startswith("iris.")})


def against_gloo() -> dict:
    """Eager and compiled results of every operator equal gloo's; gradients; refusals that name the rank."""
    said = {"no context": _raises(RuntimeError, "iris.compile.setup(ctx)", lambda: fc.all_reduce(torch.ones(2)))}
    ctx = iris.iris("64MiB")
    rank, world = ctx.cur_rank, ctx.num_ranks
    compile_ctx = fc.setup(ctx)
    assert fc.get_context() is ctx and iris.compile.get_context() is ctx
    group = dist.group.WORLD
    call = 0

    # -- eager: every operator, float and integer dtypes, the summed and the gathered reductions
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        call += 1
        x = _values(rank, call, SHAPE, dtype)
        before = x.clone()
        for op in ("sum", "avg", "max") if dtype.is_floating_point else ("sum", "min", "bxor"):
            gloo_op = "sum" if op == "avg" else op  # gloo has no AVG: its sum, divided
            expected = _gloo(funcol.all_reduce(x, gloo_op, group))
            if op == "avg":
                expected = expected / world
            _check_equal(f"all_reduce {op} {dtype}", fc.all_reduce(x, op=op), expected)
            _check_equal(f"reduce_scatter {op} {dtype}", fc.reduce_scatter(x, op=op),
                         expected.reshape(world, -1)[rank].reshape(SHAPE[0] // world, *SHAPE[1:]))
        _check_equal(f"all_gather {dtype}", fc.all_gather(x, world), _gloo(ALL_GATHER(x, 0, group)))
        _check_equal("the input is left as it was", x, before)
    odd = _values(rank, 98, (9,), torch.float16)[1:]  # starts 2 bytes into its storage: staged as bytes, not words
    _check_equal("all_gather of a slice", fc.all_gather(odd), _gloo(ALL_GATHER(odd.clone(), 0, group)))
    _check_equal("max of a slice", fc.all_reduce(odd, op="max"), _gloo(funcol.all_reduce(odd.clone(), "max", group)))
    x = _values(rank, 99, SHAPE, torch.float32)  # gloo's own reduce_scatter, once
    _check_equal("reduce_scatter as gloo's", fc.reduce_scatter(x, world, compile_ctx),
                 _gloo(REDUCE_SCATTER(x, "sum", 0, group)))
    _check_equal("torch.ops.iris.all_reduce, upstream's one-argument form", torch.ops.iris.all_reduce(x),
                 _gloo(funcol.all_reduce(x, "sum", group)))

    # -- compiled, fullgraph: a tensor-parallel step whose collectives stay in the graph
    def step(x, w, collectives):
        all_reduce, all_gather, reduce_scatter, wait = collectives
        h = wait(all_reduce(x @ w))
        gathered = all_gather(torch.relu(h))
        return reduce_scatter(gathered * 2.0) + h.sum(), gathered.mean()

    ours = (torch.ops.iris.all_reduce, fc.all_gather, lambda t: fc.reduce_scatter(t, op="avg"), fc.wait_tensor)
    theirs = (lambda t: funcol.all_reduce(t, "sum", group), lambda t: ALL_GATHER(t, 0, group),
              lambda t: REDUCE_SCATTER(t, "sum", 0, group) / world, funcol.wait_tensor)
    graphs: list = []
    compiled = torch.compile(step, fullgraph=True, backend=_recorder(graphs))
    for _ in range(2):  # the second call runs the same graph, not a new one
        call += 1
        x, w = _values(rank, call, (4, 8), torch.float32), _values(0, call, (8, 8), torch.float32)
        got = compiled(x, w, ours)
        expected = step(x, w, theirs)
        for name, a, b in zip(("output", "mean"), got, expected, strict=True):
            _check_equal(f"compiled step's {name}", a, funcol.wait_tensor(b))
    assert len(graphs) == 1, f"{len(graphs)} graphs: recompiled"
    nodes = _iris_nodes(graphs[0])
    assert nodes == ["iris.all_gather", "iris.all_reduce", "iris.reduce_scatter", "iris.wait_tensor"], nodes

    # -- gradients, compiled (AOTAutograd traces the backward through the gradient formulas) and eager
    grads = []
    for run in (torch.compile(step, fullgraph=True, backend="aot_eager"), step):
        w = _values(0, call, (8, 8), torch.float32).requires_grad_()
        out, mean = run(x, w, ours)
        (out.sum() + mean).backward()
        grads.append(w.grad)
    _check_equal("compiled gradient", grads[0], grads[1])
    # by hand: y = all_reduce(x) summed on every rank: dy/dx = world ones (the gradient is all-reduced too)
    xg = x.clone().requires_grad_()
    fc.all_reduce(xg).sum().backward()
    _check_equal("all_reduce's gradient", xg.grad, torch.full_like(x, float(world)))

    # -- refusals: before any data moves, on every rank alike, naming the rank; the ranks stay in step after them
    bad = torch.ones(world + 1, 4)
    said["reduce_scatter rows"] = _raises(ValueError, f"rank {rank}: reduce_scatter cuts dim 0",
                                          lambda: fc.reduce_scatter(bad))
    said["compiled reduce_scatter rows"] = _raises(Exception, f"rank {rank}: reduce_scatter cuts dim 0",
                                                   lambda: torch.compile(fc.reduce_scatter, fullgraph=True,
                                                                         backend="aot_eager")(bad))
    said["world_size"] = _raises(ValueError, f"rank {rank}: all_gather: world_size={world + 2}",
                                 lambda: fc.all_gather(x, world + 2))
    said["op"] = _raises(ValueError, f"rank {rank}: all_reduce: op='median'", lambda: fc.all_reduce(x, op="median"))
    said["integer avg"] = _raises(ValueError, f"rank {rank}: ReduceOp.AVG of a torch.int64",
                                  lambda: fc.all_reduce(torch.ones(3, dtype=torch.int64), op="avg"))
    said["ctx"] = _raises(TypeError, "ctx= takes what setup(ctx) returned", lambda: fc.all_reduce(x, "not a context"))
    _check_equal("after the refusals", fc.all_reduce(x), _gloo(funcol.all_reduce(x, "sum", group)))
    return said


def on_the_iris_backend() -> dict:
    """Without setup, the operators run on the context of ``dist.init_process_group("iris")``."""
    dist.init_process_group("iris")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert fc.get_context() is iris.distributed.context()
    x = _values(rank, 1, SHAPE, torch.float32)
    expected = sum(_values(r, 1, SHAPE, torch.float32) for r in range(world))  # 2 ranks: one rounding either way
    _check_equal("all_reduce on the backend's context", fc.all_reduce(x), expected)
    compiled = torch.compile(lambda t: torch.ops.iris.reduce_scatter(t, world) * 1.0, fullgraph=True,
                             backend="aot_eager")
    mine = expected.reshape(world, -1)[rank].reshape(SHAPE[0] // world, *SHAPE[1:])
    _check_equal("compiled reduce_scatter", compiled(x), mine)
    dist.destroy_process_group()
    return {"rank": rank}
