"""Code that runs inside each rank for tests/test_ccl_rooted.py (and tests/gpu/test_ccl_cuda.py): broadcast, reduce,
gather, scatter and the point-to-point operations, against torch.distributed (gloo) where it has the operation on
CPU tensors, else against a reference every rank rebuilds from seeded inputs. Backend: env ``IRIS_TEST_BACKEND``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import iris
from iris.ccl import Config, P2POp, irecv, isend

from .rank_cases_ccl import BACKEND, _check_equal, _ctx, _raises, _values

SHAPES = ((5, 37), (1000,))  # 185 and 1000 elements: neither a multiple of the blocks
DTYPES = (torch.float32, torch.bfloat16)
ROOTED_VARIANTS = ("push", "copy_engines") if BACKEND == "cuda" else ("push",)  # copy engines: GPUs only


def _torch_reference(op, tensor, *args, **kwargs):
    """``op`` of torch.distributed on a CPU copy (gloo), returned as a CPU tensor."""
    copy = tensor.detach().cpu().clone()
    op(copy, *args, **kwargs)
    return copy


def _sum_in_rank_order(world, call, shape, dtype, ranks=None):
    """What our reductions compute: float32 sums in rank order, rounded once."""
    total = torch.zeros(shape, dtype=torch.float32)
    for r in ranks if ranks is not None else range(world):
        total += _values(r, call, shape, dtype).float()
    return total.to(dtype)


def rooted_collectives(block: int | None, shapes=SHAPES, gluon: bool = False) -> dict:
    """Every rooted collective, every variant the backend has, both spellings, every root, each shape in two dtypes,
    twice each (the second call replays), checked bit for bit; with ``gluon`` the Gluon twins (no copy engines)."""
    ctx = _ctx()
    rank, world = ctx.cur_rank, ctx.num_ranks
    calls = 0
    for shape in map(tuple, shapes):
        for dtype in DTYPES:
            for root in range(world):
                for variant in ROOTED_VARIANTS[:1] if gluon else ROOTED_VARIANTS:
                    config = Config(broadcast_variant=variant, block_size=block, use_gluon=gluon)
                    mine = ctx.zeros(*shape, dtype=dtype)
                    out = ctx.zeros(*shape, dtype=dtype)
                    for _ in range(2):
                        calls += 1
                        mine.copy_(_values(rank, calls, shape, dtype))
                        expected = _values(root, calls, shape, dtype)
                        if dtype == torch.float32:  # against torch.distributed's own broadcast
                            expected = _torch_reference(dist.broadcast, mine, src=root)
                        out.fill_(-1)
                        ctx.ccl.broadcast(out, mine, src=root, config=config)
                        _check_equal(f"broadcast(out, inp, src={root}) {dtype} {shape}", out, expected)
                        _check_equal("broadcast leaves its input", mine, _values(rank, calls, shape, dtype))
                        workspace = ctx.ccl.broadcast(mine, src=root, config=config)
                        _check_equal(f"broadcast(tensor, src={root}) {dtype} {shape}", mine, expected)
                        if gluon:  # what ran was the Gluon twin
                            kernels = {bound.kernel.__name__ for bound in workspace.launches.values()
                                       if not bound.direct} or {bound.compiled.name for bound in
                                                                workspace.launches.values()}
                            assert all(name.startswith("gluon_") for name in kernels), kernels

                    rows = (shape[0] * world, *shape[1:])
                    gathered = ctx.zeros(*rows, dtype=dtype)
                    chunk = ctx.zeros(*shape, dtype=dtype)
                    for _ in range(2):
                        calls += 1
                        chunk.copy_(_values(rank, calls, shape, dtype))
                        gathered.fill_(-1)
                        ctx.ccl.gather(gathered, chunk, dst=root, config=config)
                        if rank == root:
                            expected = torch.cat([_values(r, calls, shape, dtype) for r in range(world)])
                            _check_equal(f"gather(dst={root}) {dtype} {shape}", gathered, expected)
                        else:
                            _check_equal("gather leaves a leaf's output", gathered, torch.full(rows, -1, dtype=dtype))
                    for _ in range(2):
                        calls += 1
                        source = ctx.zeros(*rows, dtype=dtype)
                        source.copy_(_values(rank, calls, rows, dtype))
                        chunk.fill_(-1)
                        ctx.ccl.scatter(chunk, source, src=root, config=config)
                        expected = _values(root, calls, rows, dtype).view(world, -1)[rank].view(shape)
                        _check_equal(f"scatter(src={root}) {dtype} {shape}", chunk, expected)

                for variant in ("push", "two_shot"):
                    config = Config(reduce_variant=variant, block_size=block, use_gluon=gluon)
                    inp = ctx.zeros(*shape, dtype=dtype)
                    out = ctx.zeros(*shape, dtype=dtype)
                    for _ in range(3):  # push's inbox halves: the third call writes the first's again
                        calls += 1
                        inp.copy_(_values(rank, calls, shape, dtype))
                        out.fill_(-1)
                        ctx.ccl.reduce(out, inp, root=root, config=config)
                        expected = _sum_in_rank_order(world, calls, shape, dtype)
                        if rank == root:
                            _check_equal(f"reduce {variant} (root={root}) {dtype} {shape}", out, expected)
                        else:
                            _check_equal("reduce leaves a leaf's output", out, torch.full(shape, -1, dtype=dtype))
                        _check_equal("reduce leaves its input", inp, _values(rank, calls, shape, dtype))
                        ctx.ccl.reduce(inp, dst=root, config=config)  # in place
                        if rank == root:
                            _check_equal(f"reduce(tensor, dst={root}) {variant}", inp, expected)
    # The size rule's choices, the root given by position.
    t = ctx.full((64,), float(rank + 1))
    ctx.ccl.reduce(t, 0)  # the root by position, as upstream's methods take it
    if rank == 0:
        _check_equal("reduce by position", t, torch.full((64,), float(world * (world + 1) // 2)))
    ctx.ccl.broadcast(t, src=world - 1)
    _check_equal("broadcast by size rule", t, torch.full((64,), float(world)))
    return {"calls": calls}


def rooted_refusals() -> dict:
    """Clear errors for bad calls, naming the rank."""
    ctx = _ctx()
    rank, world = ctx.cur_rank, ctx.num_ranks
    t = ctx.zeros(8)
    said = [
        _raises(ValueError, f"src={world}", lambda: ctx.ccl.broadcast(t, src=world)),
        _raises(ValueError, "give one", lambda: ctx.ccl.reduce(t, dst=0, root=1)),
        _raises(TypeError, "(tensor) in place or (output, input)", lambda: ctx.ccl.broadcast()),
        _raises(ValueError, "needs an output of shape", lambda: ctx.ccl.gather(ctx.zeros(8), t)),
        _raises(ValueError, "needs an input of shape", lambda: ctx.ccl.scatter(t, ctx.zeros(8))),
        _raises(ValueError, "not on the symmetric heap", lambda: ctx.ccl.broadcast(torch.zeros(8))),
        _raises(ValueError, "reduces float32, float16 or bfloat16",
                lambda: ctx.ccl.reduce(ctx.zeros(8, dtype=torch.int32))),
        _raises(NotImplementedError, "only ReduceOp.SUM", lambda: ctx.ccl.reduce(t, op=dist.ReduceOp.MAX)),
        _raises(ValueError, "broadcast_variant", lambda: Config(broadcast_variant="tree")),
        _raises(ValueError, "init_p2p", lambda: ctx.ccl.send(t, dst=(rank + 1) % world)),
    ]
    assert all(f"rank {rank}" in message for message in said[:2]), said
    ctx.ccl.barrier(async_op=True)  # upstream's spelling; the state under its newer name too
    assert ctx._ccl_barrier_state[None].data_ptr() == ctx._device_barrier_state[None].data_ptr()
    t.fill_(rank + 1)
    ctx.ccl.reduce(t, dst=0, config=Config(reduce_variant="one_shot"))
    if rank == 0:
        _check_equal("reduce one_shot (upstream's name)", t, torch.full((8,), float(world * (world + 1) // 2)))
    ctx.barrier()
    return {"said": said}


def rooted_in_groups() -> dict:
    """On 4 ranks: two groups of two ([0, 1], [2, 3]) and a strided one ([0, 2], [1, 3]), roots given as ranks of
    the group."""
    ctx = _ctx()
    rank = ctx.cur_rank
    consecutive = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    strided = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    for group, ranks in ((consecutive, [rank // 2 * 2, rank // 2 * 2 + 1]), (strided, [rank % 2, rank % 2 + 2])):
        t = ctx.full((100,), float(rank))
        ctx.ccl.broadcast(t, src=1, group=group)  # the group's second member
        _check_equal(f"broadcast in group {ranks}", t, torch.full((100,), float(ranks[1])))
        t = ctx.full((100,), float(rank + 1))
        ctx.ccl.reduce(t, dst=0, group=group)
        if rank == ranks[0]:
            _check_equal(f"reduce in group {ranks}", t, torch.full((100,), float(sum(ranks) + 2)))
        out = ctx.zeros(200)
        ctx.ccl.gather(out, ctx.full((100,), float(rank)), dst=1, group=group)
        if rank == ranks[1]:
            _check_equal(f"gather in group {ranks}", out, torch.cat([torch.full((100,), float(r)) for r in ranks]))
        chunk = ctx.zeros(100)
        source = ctx.arange(200, dtype=torch.float32)
        source += 1000 * rank
        ctx.ccl.scatter(chunk, source, src=0, group=group)
        expected = torch.arange(200, dtype=torch.float32).view(2, -1)[ranks.index(rank)] + 1000 * ranks[0]
        _check_equal(f"scatter in group {ranks}", chunk, expected)
    ctx.barrier()
    return {"ok": True}


def point_to_point(block: int, gluon: bool = False) -> dict:
    """send/recv, sendrecv around the ring, every pair through batch_isend_irecv, more messages in a row than a
    sender's slots (flow control), tensors on and off the heap, three dtypes, and the CPU's size check."""
    ctx = _ctx()
    rank, world, dev = ctx.cur_rank, ctx.num_ranks, ctx.device
    right, left = (rank + 1) % world, (rank - 1) % world
    p2p = ctx.ccl.init_p2p(max_numel=3000, dtype=torch.float32, config=Config(block_size=block, use_gluon=gluon))
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for n in (1, 100, 3000):
            mine = (torch.arange(n) + 10000 * rank).to(dtype).to(dev)
            got = torch.zeros(n, dtype=dtype, device=dev)
            ctx.ccl.sendrecv(mine, got, dst=right, src=left)
            _check_equal(f"sendrecv {n} {dtype}", got, (torch.arange(n) + 10000 * left).to(dtype))
    # five messages each way in a row before receiving any: the third waits until the receiver took the first
    if rank in (0, 1):
        peer = 1 - rank
        sent = [torch.full((2000,), float(100 * rank + i), device=dev) for i in range(5)]
        received = [torch.zeros(2000, device=dev) for _ in range(5)]
        works = ctx.ccl.batch_isend_irecv([P2POp(isend, t, peer) for t in sent[:2]]
                                          + [P2POp(irecv, t, peer) for t in received[:2]])
        assert all(w.wait() for w in works)
        for i in range(2, 5):
            ctx.ccl.send(sent[i], dst=peer, p2p_state=p2p)
            ctx.ccl.recv(received[i], src=peer, p2p_state=p2p)
        for i in range(5):
            _check_equal(f"message {i} from rank {peer}", received[i], torch.full((2000,), float(100 * peer + i)))
    # every pair at once, heap tensors
    ops, inboxes = [], {}
    for peer in range(world):
        if peer != rank:
            inboxes[peer] = ctx.zeros(64)
            ops += [P2POp(irecv, inboxes[peer], peer), P2POp(isend, ctx.full((64,), float(rank * 100 + peer)), peer)]
    for work in ctx.ccl.batch_isend_irecv(ops):
        work.wait()
    for peer, box in inboxes.items():
        _check_equal(f"all pairs from {peer}", box, torch.full((64,), float(peer * 100 + rank)))
    # a receive into a tensor of another size than the message: a clear error on the CPU
    said = ""
    if rank in (0, 1):
        if BACKEND == "cpu" and rank == 0:
            ctx.ccl.send(torch.ones(10), dst=1)
        elif BACKEND == "cpu":
            said = _raises(ValueError, "got a message of 40 bytes into a tensor of 80 bytes",
                           lambda: ctx.ccl.recv(torch.zeros(20), src=0))
        said += _raises(ValueError, "call init_p2p with a larger max_numel",
                        lambda: ctx.ccl.send(torch.zeros(3001, device=dev), dst=1 - rank))
        said += _raises(ValueError, "is this rank itself", lambda: ctx.ccl.send(torch.zeros(3, device=dev), dst=rank))
        said += _raises(ValueError, "this rank's kernels run on", lambda: ctx.ccl.send(torch.zeros(3, device="meta"),
                                                                                       dst=1 - rank))
    ctx.barrier()
    return {"said": said}


def rooted_graph_capture(numel: int) -> dict:
    """GPU only: broadcast, reduce (both variants), gather, scatter and a ring of sendrecv captured in one CUDA
    graph; three replays, each with new inputs, each checked (flags and message counters live on the device)."""
    ctx = _ctx()
    rank, world = ctx.cur_rank, ctx.num_ranks
    right, left = (rank + 1) % world, (rank - 1) % world
    inp = ctx.zeros(numel)
    outs = {name: ctx.zeros(numel) for name in ("broadcast", "push", "two_shot", "scatter")}
    gathered, chunks = ctx.zeros(world * numel), ctx.zeros(world * numel)
    ring_in, ring_out = torch.zeros(numel, device=ctx.device), torch.zeros(numel, device=ctx.device)
    ctx.ccl.init_p2p(max_numel=numel, dtype=torch.float32)

    def step():
        ctx.ccl.broadcast(outs["broadcast"], inp, src=world - 1)
        for variant in ("push", "two_shot"):
            ctx.ccl.reduce(outs[variant], inp, root=0, config=Config(reduce_variant=variant))
        ctx.ccl.gather(gathered, inp, dst=0)
        ctx.ccl.scatter(outs["scatter"], chunks, src=0)
        ctx.ccl.sendrecv(ring_in, ring_out, dst=right, src=left)

    def values(call, r):
        return _values(r, call, (numel,), torch.float32).to(ctx.device)

    def fill(call):
        inp.copy_(values(call, rank))
        chunks.copy_(torch.cat([values(call, r) + 1000 * r for r in range(world)]) if rank == 0 else chunks)
        ring_in.copy_(values(call, rank) * 2)

    fill(0)
    step()  # workspaces and compiled kernels, outside the capture
    torch.cuda.synchronize()
    ctx.barrier()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        step()
    for call in range(1, 4):
        fill(call)
        torch.cuda.synchronize()
        ctx.barrier()  # every rank's inputs are in place before any replay reads them
        graph.replay()
        torch.cuda.synchronize()
        ctx.barrier()
        _check_equal(f"replay {call} broadcast", outs["broadcast"].cpu(), values(call, world - 1).cpu())
        if rank == 0:
            total = _sum_in_rank_order(world, call, (numel,), torch.float32)
            for variant in ("push", "two_shot"):
                _check_equal(f"replay {call} reduce {variant}", outs[variant].cpu(), total)
            _check_equal(f"replay {call} gather", gathered.cpu(),
                         torch.cat([_values(r, call, (numel,), torch.float32) for r in range(world)]))
        _check_equal(f"replay {call} scatter", outs["scatter"].cpu(), (values(call, rank) + 1000 * rank).cpu())
        _check_equal(f"replay {call} sendrecv", ring_out.cpu(), (values(call, left) * 2).cpu())
    return {"replays": 3}


def all_to_all_v_cases(block_m: int, block_n: int) -> dict:
    """all_to_all_v with equal and unequal widths (rank r sends (r + 1) * 3 columns to everyone; rank j sends rank r
    j + r + 1 columns), the input a narrower view of a wider heap buffer, twice each; then a width that disagrees."""
    ctx = _ctx()
    rank, world = ctx.cur_rank, ctx.num_ranks
    config = Config(block_size_m=block_m, block_size_n=block_n)
    M = 5
    layouts = {"equal": lambda r, j: 4, "by sender": lambda r, j: (r + 1) * 3, "by pair": lambda r, j: j + r + 1}
    for name, width in layouts.items():
        ins = [width(rank, j) for j in range(world)]
        outs = [width(s, rank) for s in range(world)]
        widest = 3 * world * world + 2 * world  # wider than any rank's input or output: allocations are symmetric
        buffer, received = ctx.zeros(M, widest), ctx.zeros(M, widest)
        out = received[:, :sum(outs)]  # a narrower view, as the widths differ between ranks
        for call in range(2):
            seed = 100 * call + len(name)

            def values(r, width=width, seed=seed):  # rank r's input, rebuilt by every rank
                widths = [width(r, j) for j in range(world)]
                return _values(r, seed, (M, sum(widths)), torch.float32), widths
            mine, _ = values(rank)
            buffer[:, :sum(ins)].copy_(mine.to(ctx.device))
            out.fill_(-1)
            ctx.ccl.all_to_all_v(out, buffer[:, :sum(ins)], outs, ins, config=config)
            expected = []
            for s in range(world):
                theirs, widths = values(s)
                start = sum(widths[:rank])
                expected.append(theirs[:, start:start + widths[rank]])
            _check_equal(f"all_to_all_v {name} call {call}", out, torch.cat(expected, dim=1))
    said = ""
    if BACKEND == "cpu":
        wrong = [4] * world
        wrong[(rank + 1) % world] = 5  # this rank expects one column more from its right neighbour than it sends
        out = ctx.zeros(M, sum(wrong) + 1)[:, :sum(wrong)]
        said = _raises(ValueError, "must agree", lambda: ctx.ccl.all_to_all_v(out, ctx.zeros(M, 4 * world), wrong,
                                                                              [4] * world))
    ctx.barrier()
    return {"said": said}


def upstream_function_forms() -> dict:
    """The function forms as upstream's programs spell them: the context after the tensors, the root by position."""
    ctx = _ctx()
    rank, world = ctx.cur_rank, ctx.num_ranks
    t = ctx.full((40,), float(rank + 1))
    iris.ccl.broadcast(t, ctx, world - 1)
    _check_equal("iris.ccl.broadcast(t, ctx, src)", t, torch.full((40,), float(world)))
    t.fill_(rank + 1)
    out = ctx.zeros(40)
    iris.ccl.reduce(out, t, ctx, 0)
    if rank == 0:
        _check_equal("iris.ccl.reduce(out, inp, ctx, root)", out, torch.full((40,), float(world * (world + 1) // 2)))
    said = _raises(TypeError, "given twice", lambda: iris.ccl.broadcast(t, ctx, 0, src=1))
    said += _raises(TypeError, "needs the context", lambda: iris.ccl.broadcast(t))
    ctx.barrier()
    return {"said": said}
