"""Code that runs inside each rank for tests/test_distributed.py (and tests/gpu/test_distributed_cuda.py): torch.
distributed on the ``iris`` backend (iris.distributed), every operation against the same operation on a gloo group
of the same ranks (on CPU copies), and training loops (DDP, FSDP2, tensor parallelism) against the same loops on
gloo. Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default; on "cuda" our tensors live on the rank's GPU).
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as functional
import torch.nn as nn

import iris  # noqa: F401  (registers the "iris" backend)

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")

OPS = (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT)


def _start(**options) -> tuple[int, int]:
    dist.init_process_group("iris", timeout=datetime.timedelta(seconds=120),
                            pg_options=iris.distributed.Options(**options))
    assert dist.get_backend() == "iris", dist.get_backend()
    return dist.get_rank(), dist.get_world_size()


def _device() -> torch.device:
    """Where our tensors live: the rank's GPU (the iris context's) on "cuda", else the CPU."""
    return iris.distributed.context().get_device() if BACKEND == "cuda" else torch.device("cpu")


def _values(rank: int, call: int, shape, dtype) -> torch.Tensor:
    """Seeded values, different per rank and call; small integers for integer dtypes (exact products)."""
    g = torch.Generator().manual_seed(1000 * call + rank)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) + 0.5).to(dtype)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def _same(what: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Ours as gloo's: exact for copies and integers; for float sums within what another summation order explains."""
    if ours.dtype.is_floating_point:
        tol = 1e-2 if ours.dtype == torch.bfloat16 else 1e-5
        ok = torch.allclose(ours.float(), theirs.float(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(ours, theirs)
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {what}: iris {ours.flatten()[:8].tolist()} ... vs gloo "
                             f"{theirs.flatten()[:8].tolist()} ...")


def _both(fn, *tensors):
    """``fn(group, *copies)`` on the iris world (copies on our device) and on gloo (CPU copies); both results, on
    the CPU."""
    ours = [t.to(_device()) for t in tensors]
    theirs = [t.clone() for t in tensors]
    fn(None, *ours)
    fn(_gloo(), *theirs)
    return [t.cpu() for t in ours], theirs


_GLOO = []


def _gloo():
    if not _GLOO:
        _GLOO.append(dist.new_group(backend="gloo"))
    return _GLOO[0]


def every_operation() -> dict:
    """Each of torch.distributed's operations on the iris backend, and on gloo with the same inputs: the same
    numbers. Returns how many comparisons were made. Point-to-point slots of 4 KiB: a message of 12 KiB goes in
    pieces."""
    rank, world = _start(p2p_bytes=4096)
    compared = 0
    call = 0

    def compare(what, fn, *tensors):
        nonlocal compared
        ours, theirs = _both(fn, *tensors)
        for a, b in zip(ours, theirs, strict=True):
            _same(what, a, b)
        compared += 1

    # Reductions: our sum kernels (float32, bfloat16) and the gathered path (other operators, integers).
    reductions = [(torch.float32, op) for op in OPS] + [
        (torch.bfloat16, dist.ReduceOp.SUM), (torch.int64, dist.ReduceOp.SUM), (torch.int64, dist.ReduceOp.MAX)]
    for dtype, op in reductions:
        call += 1
        compare(f"all_reduce {op} {dtype}", lambda g, t, op=op: dist.all_reduce(t, op=op, group=g),
                _values(rank, call, (3, 37), dtype))
    for dtype, op, root in ((torch.float32, dist.ReduceOp.SUM, world - 1), (torch.int64, dist.ReduceOp.MAX, 0)):
        call += 1
        ours, theirs = _both(lambda g, t, op=op, root=root: dist.reduce(t, dst=root, op=op, group=g),
                             _values(rank, call, (70,), dtype))
        if rank == root:  # a leaf's tensor is undefined afterwards (gloo writes partial sums into it)
            _same(f"reduce {op} {dtype}", ours[0], theirs[0])
        compared += 1
    for dtype, op in ((torch.float32, dist.ReduceOp.SUM), (torch.bfloat16, dist.ReduceOp.SUM),
                      (torch.int64, dist.ReduceOp.SUM), (torch.float32, dist.ReduceOp.MAX)):
        call += 1  # 15 elements a rank: not a multiple of our chunks' 16
        compare(f"reduce_scatter_tensor {op} {dtype}",
                lambda g, out, inp, op=op: dist.reduce_scatter_tensor(out, inp, op=op, group=g),
                torch.zeros(5, 3, dtype=dtype), _values(rank, call, (5 * world, 3), dtype))
    call += 1
    compare("reduce_scatter", lambda g, out, *inp: dist.reduce_scatter(out, list(inp), group=g),
            torch.zeros(33), *[_values(rank, call + i, (33,), torch.float32) for i in range(world)])
    # Copies: any dtype goes as words (4 bytes) or bytes; bfloat16 tensors of odd sizes take the bytes.
    call += 1
    compare("all_gather_into_tensor", lambda g, out, inp: dist.all_gather_into_tensor(out, inp, group=g),
            torch.zeros(world * 7, 3, dtype=torch.bfloat16), _values(rank, call, (7, 3), torch.bfloat16))
    call += 1
    compare("all_gather", lambda g, inp, *outs: dist.all_gather(list(outs), inp, group=g),
            _values(rank, call, (2, 9), torch.int64), *[torch.zeros(2, 9, dtype=torch.int64) for _ in range(world)])
    call += 1
    compare("all_to_all_single", lambda g, out, inp: dist.all_to_all_single(out, inp, group=g),
            torch.zeros(world * 3, 5), _values(rank, call, (world * 3, 5), torch.float32))
    sent = [(rank + j) % 3 + 1 for j in range(world)]  # rows to rank j
    got = [(s + rank) % 3 + 1 for s in range(world)]  # rows from rank s: its sent[rank]
    call += 1
    compare("all_to_all_single with split sizes",
            lambda g, out, inp: dist.all_to_all_single(out, inp, got, sent, group=g),
            torch.zeros(sum(got), 3, dtype=torch.bfloat16), _values(rank, call, (sum(sent), 3), torch.bfloat16))
    call += 1
    compare("all_to_all", lambda g, *ts: dist.all_to_all(list(ts[:world]), list(ts[world:]), group=g),
            *[torch.zeros(3) for s in range(world)],  # gloo's takes one size only
            *[_values(rank, call + j, (3,), torch.float32) for j in range(world)])
    for root in {0, world - 1}:
        call += 1
        compare(f"broadcast from {root}", lambda g, t, root=root: dist.broadcast(t, src=root, group=g),
                _values(rank, call, (4, 11), torch.bfloat16))
    call += 1  # a float16 slice starts 2 bytes into its storage: its bytes are staged, not viewed as words
    compare("broadcast of a slice", lambda g, t: dist.broadcast(t[1:10], src=0, group=g),
            _values(rank, call, (11,), torch.float16))
    root = world - 1
    call += 1
    rows = [torch.zeros(6) for _ in range(world)] if rank == root else []
    compare(f"gather to {root}", lambda g, inp, *outs: dist.gather(inp, list(outs) or None, dst=root, group=g),
            _values(rank, call, (6,), torch.float32), *rows)
    call += 1
    pieces = [_values(root, call + j, (6,), torch.float32) for j in range(world)] if rank == root else []
    compare(f"scatter from {root}", lambda g, out, *ins: dist.scatter(out, list(ins) or None, src=root, group=g),
            torch.zeros(6), *pieces)
    t = _values(rank, 0, (8,), torch.float32).to(_device())
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))  # NCCL's scaled sum (gloo has none)
    _same("all_reduce PREMUL_SUM", t.cpu(), sum(_values(r, 0, (8,), torch.float32) for r in range(world)) * 0.5)
    # Point-to-point: a ring, blocking and batched, one message longer than a slot (it goes in pieces).
    right, left = (rank + 1) % world, (rank - 1) % world
    for nbytes in (40, 3 * 4096 + 3):
        message = torch.full((nbytes,), rank % 256, dtype=torch.uint8, device=_device())
        received = torch.zeros(nbytes, dtype=torch.uint8, device=_device())
        if rank % 2 == 0:
            dist.send(message, right)
            dist.recv(received, left)
        else:
            dist.recv(received, left)
            dist.send(message, right)
        _same(f"send/recv of {nbytes} bytes", received.cpu(), torch.full((nbytes,), left % 256, dtype=torch.uint8))
        compared += 1
    into = torch.zeros(3, 4, device=_device())
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((3, 4), float(rank), device=_device()), right),
                                    dist.P2POp(dist.irecv, into, left)])
    for work in works:
        work.wait()
    _same("batch_isend_irecv", into.cpu(), torch.full((3, 4), float(left)))
    # Objects, async work, barriers, sub-groups, functional collectives eager and compiled.
    everyone = [None] * world
    dist.all_gather_object(everyone, {"rank": rank})
    assert everyone == [{"rank": r} for r in range(world)], everyone
    box = [f"from {world - 1}" if rank == world - 1 else None]
    dist.broadcast_object_list(box, src=world - 1)
    assert box == [f"from {world - 1}"], box
    t = torch.ones(5, device=_device())
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert work.get_future().wait()[0] is t and t.tolist() == [float(world)] * 5
    work.synchronize()
    assert work.is_completed()
    dist.barrier()
    dist.group.WORLD.monitored_barrier(datetime.timedelta(seconds=60))
    x = functional.all_reduce(torch.full((3,), float(rank), device=_device()), "sum", dist.group.WORLD)
    _same("functional all_reduce", functional.wait_tensor(x).cpu(), torch.full((3,), float(sum(range(world)))))

    @torch.compile(fullgraph=True, backend="aot_eager")  # traced whole by dynamo and AOT autograd (inductor's C++
    def step(v):                                          # compile would add a minute of CPU and test nothing of ours)
        total = functional.all_reduce(v * 2, "sum", dist.group.WORLD)
        return functional.all_gather_tensor(total + 1, 0, dist.group.WORLD)

    out = step(torch.full((2,), float(rank), device=_device()))
    _same("compiled functional all_reduce + all_gather", out.cpu(),
          torch.full((2 * world,), 2.0 * sum(range(world)) + 1))
    compared += 4
    dist.destroy_process_group()
    return {"compared": compared}


class TinyTransformer(nn.Module):
    """A transformer block and an MLP over a 32-token vocabulary: small enough for CPU ranks."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)
        self.head = nn.Linear(16, 32)

    def forward(self, tokens):
        h = self.block(self.embed(tokens))
        h = h + self.down(torch.relu(self.up(h)))
        return self.head(h)


def _train(kind: str, group, steps: int = 3, device=None) -> list[float]:
    """``steps`` SGD steps of the tiny transformer parallelised by ``kind`` over ``group`` on ``device``; the
    losses."""
    from torch.distributed.device_mesh import DeviceMesh

    device = device or torch.device("cpu")
    torch.manual_seed(0)
    model = TinyTransformer().to(device)
    rank = dist.get_rank()
    if kind == "ddp":
        model = nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.01)  # several buckets
    elif kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        mesh = DeviceMesh.from_group(group or dist.group.WORLD, device.type)
        fully_shard(model.block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    elif kind == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = DeviceMesh.from_group(group or dist.group.WORLD, device.type)
        parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
        rank = 0  # tensor parallelism: every rank sees the same batch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1 + rank)
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, 32, (4, 8), generator=data).to(device)
        targets = torch.randint(0, 32, (4, 8), generator=data).to(device)
        loss = nn.functional.cross_entropy(model(tokens).reshape(-1, 32), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def groups_of_two() -> dict:
    """On 4 ranks: pairs of ranks as sub-groups, consecutive ([0, 1], [2, 3]) and strided ([0, 2], [1, 3]), each
    pair's all_reduce, a send and an all_to_all_single with split sizes within it (group ranks, as torch.distributed
    numbers them). Every rank calls its
    own pair's collectives at the same time: the first call of a shape allocates on every rank's heap."""
    rank, world = _start()
    sums = {}
    for name, pairs in (("consecutive", [[0, 1], [2, 3]]), ("strided", [[0, 2], [1, 3]])):
        groups = [dist.new_group(pair) for pair in pairs]  # every rank makes every group
        mine = next(g for g, pair in zip(groups, pairs, strict=True) if rank in pair)
        members = dist.get_process_group_ranks(mine)
        assert "IrisProcessGroup" in type(mine).__name__, type(mine)
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=mine)
        assert t.tolist() == [float(sum(r + 1 for r in members))] * 4, (t, members)
        other = members[1 - members.index(rank)]
        message = torch.full((3,), float(rank))
        received = torch.zeros(3)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, message, other, mine),
                                        dist.P2POp(dist.irecv, received, other, mine)])
        for work in works:
            work.wait()
        assert received.tolist() == [float(other)] * 3, received
        me = members.index(rank)  # all_to_all_single with split sizes inside the pair: member i sends j i + j + 1
        got = torch.zeros(sum(s + me + 1 for s in range(2)))
        dist.all_to_all_single(got, torch.full((sum(me + j + 1 for j in range(2)),), float(rank)),
                               [s + me + 1 for s in range(2)], [me + j + 1 for j in range(2)], group=mine)
        want = torch.cat([torch.full((s + me + 1,), float(members[s])) for s in range(2)])
        assert torch.equal(got, want), (got, want)
        sums[name] = t[0].item()
    dist.destroy_process_group()
    return sums


def training_loops() -> dict:
    """DDP, FSDP2 and tensor parallelism, each on the iris backend and on gloo: the losses of each step agree
    within 1e-4 (float32 gradients summed in another order differ in their last bits, and three SGD steps carry
    that forward; a wrong collective changes the second loss in its first or second digit). On "cuda" ours train on
    the GPU, gloo's on the CPU: 1e-3 (the GPU's matrix products round differently)."""
    _start()
    losses = {}
    tolerance = 1e-3 if BACKEND == "cuda" else 1e-4
    for kind in ("ddp", "fsdp2", "tp"):
        ours, theirs = _train(kind, None, device=_device()), _train(kind, _gloo())
        if any(abs(a - b) > tolerance for a, b in zip(ours, theirs, strict=True)):
            raise AssertionError(f"rank {dist.get_rank()}: {kind} on iris lost {ours}, on gloo {theirs}")
        losses[kind] = ours
    dist.destroy_process_group()
    return losses


def beside_gloo() -> dict:
    """A program whose torch.distributed runs gloo (a workbench engine's) gives its context to an iris group."""
    ctx = iris.iris("64MiB")
    group = iris.distributed.group_of(ctx)
    t = torch.full((3,), float(ctx.cur_rank + 1))
    dist.all_reduce(t, group=group)
    assert t.tolist() == [float(sum(range(1, ctx.num_ranks + 1)))] * 3, t
    assert iris.distributed.context() is ctx
    return {"default": dist.get_backend(), "group": dist.get_backend(group)}


def refusals() -> dict:
    """Bad input: a clear error naming the rank and what to do; the group started with torch's device-map spelling."""
    dist.init_process_group("cpu:iris,cuda:iris", timeout=datetime.timedelta(seconds=120))
    assert "IrisProcessGroup" in type(dist.group.WORLD).__name__, type(dist.group.WORLD)
    rank, world = dist.get_rank(), dist.get_world_size()
    said = []

    def expect(exc, fn, *needles):
        try:
            fn()
        except exc as error:
            text = str(error)
            assert all(n in text for n in (f"rank {rank}", *needles)), text
            said.append(text)
            return
        raise AssertionError(f"rank {rank}: expected {exc.__name__} containing {needles}")

    expect(ValueError, lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG), "AVG")
    expect(ValueError, lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND), "bitwise")
    expect(ValueError, lambda: dist.all_gather_into_tensor(torch.zeros(3), torch.ones(2)), "all_gather_into_tensor")
    expect(ValueError, lambda: dist.all_to_all_single(torch.zeros(4), torch.ones(4), [1] * world, [3] * world),
           "split sizes")
    expect(ValueError, lambda: dist.recv(torch.zeros(2)), "src")
    dist.barrier()  # every rank refused alike, nothing is half-done: the group still works
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [float(world)] * 3
    dist.destroy_process_group()
    return {"said": said}


def graph_capture() -> dict:
    """On a GPU: dist.all_reduce, all_gather_into_tensor and reduce_scatter_tensor captured in one CUDA graph (after a
    first call outside it, which allocates their workspaces and staging), replayed with new inputs."""
    rank, world = _start()
    device = _device()
    inp = torch.zeros(1000, device=device)
    gathered = torch.zeros(world * 1000, device=device)
    scattered = torch.zeros(1000 // world if 1000 % world == 0 else 0, device=device)

    def body():
        dist.all_reduce(inp)
        dist.all_gather_into_tensor(gathered, inp)
        if scattered.numel():
            dist.reduce_scatter_tensor(scattered, gathered[:1000])

    inp.fill_(1.0)
    body()  # outside the capture: workspaces and staging buffers are made here
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    for replay in range(3):
        inp.fill_(float(rank + replay))
        graph.replay()
        torch.cuda.synchronize()
        total = float(sum(r + replay for r in range(world)))
        assert inp.eq(total).all().item(), (replay, inp[:4])
        assert gathered.eq(total).all().item(), (replay, gathered[:4])
        if scattered.numel():
            assert scattered.eq(world * total).all().item(), (replay, scattered[:4])
    dist.destroy_process_group()
    return {"replays": 3}


def fail_mid_step() -> None:
    """Under torchrun: rank 1 raises in the middle of a DDP step, after a first step went through."""
    _start()
    model = nn.parallel.DistributedDataParallel(TinyTransformer())
    tokens = torch.randint(0, 32, (2, 8))
    for step in range(2):
        loss = model(tokens).sum()
        if step == 1 and dist.get_rank() == 1:
            raise RuntimeError("rank 1 fails mid-step on purpose")
        loss.backward()
    dist.destroy_process_group()


if __name__ == "__main__":  # python -m tests.rank_cases_distributed (under torchrun)
    os.environ.setdefault("IRIS_BACKEND", "cpu")
    fail_mid_step()
