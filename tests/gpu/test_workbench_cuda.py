"""The workbench on the CUDA backend: one engine per GPU (ranks share a GPU when there are fewer than 2).

A Triton kernel defined in a ``%%iris_kernel`` cell puts each rank's block into the next rank's heap;
the values are pulled back and checked, then the same through ``Workbench.run``. Every engine JITs the
kernel itself; they share Triton's cache directory, so after the first rank compiles the others load it.

ipyparallel and its needs are not on the GPU image; carry them as wheels (``.whl``, made here with
``pip download --no-deps --only-binary=:all: --python-version 3.12 ...``, see tests/gpu/install_wheels.sh):
ipyparallel 9.2.0, ipykernel 7.4.0, ipython 9.18.1, ipython_pygments_lexers 1.1.1, jupyter_client 8.10.0,
jupyter_core 5.9.1, pyzmq 27.3.0, tornado 6.6.1, traitlets 5.16.1, decorator 5.3.1, comm 0.2.3,
debugpy 1.8.22, matplotlib-inline 0.2.2, nest-asyncio2 1.7.4, jedi 0.20.1, parso 0.8.7, pexpect 4.9.0,
ptyprocess 0.7.0, prompt_toolkit 3.0.53, wcwidth 0.9.4, stack-data 0.6.3, executing 2.3.0,
asttokens 3.0.2, pure_eval 0.2.4, platformdirs 4.14.7. Then, on the GPU machine::

    source tests/gpu/install_wheels.sh && bash tests/gpu/run_gpu_checks.sh -k workbench
"""

from __future__ import annotations

import time

import pytest
import torch

from tests.gpu import WORLD

pytest.importorskip("ipyparallel", reason="needs the carried Jupyter wheels (tests/gpu/install_wheels.sh)")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

import workbench  # noqa: E402

PUT_TO_NEXT = """
received = ctx.zeros(4096, dtype=torch.float32)
mine = ctx.full((4096,), float(rank + 1))

@triton.jit
def put_to_next(src, dst, cur_rank, world, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.put(src + offs, dst + offs, cur_rank, (cur_rank + 1) % world, heap_bases)

ctx.barrier()
put_to_next[(4096 // 1024,)](mine, received, rank, world_size, ctx.get_heap_bases(), BLOCK=1024)
ctx.barrier()
"""


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    started = time.perf_counter()
    ip.run_line_magic("iris", f"start -n {WORLD} --backend cuda --heap 64MiB --timeout 120")
    print(f"{WORLD} CUDA ranks started in {time.perf_counter() - started:.1f} s")
    yield ip
    workbench.current().stop()


def expected(world: int) -> list[float]:
    return [float((rank - 1) % world + 1) for rank in range(world)]


def test_ranks_are_on_their_gpus(shell):
    wb = workbench.current()
    devices = wb.pull("str(ctx.get_device())")
    assert devices == [f"cuda:{rank % torch.cuda.device_count()}" for rank in range(WORLD)]
    print(wb.status())


def test_remote_put_through_the_magic(shell):
    result = shell.run_cell(f"%%iris_kernel --timeout 120\n{PUT_TO_NEXT}", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    received = workbench.current().pull("received")
    assert all(t.device.type == "cpu" for t in received)  # pulled as CPU copies
    assert [float(t.min()) for t in received] == [float(t.max()) for t in received] == expected(WORLD)


def test_remote_put_through_run_then_pull(shell):
    wb = workbench.current()
    started = time.perf_counter()
    wb.run(PUT_TO_NEXT.replace("float(rank + 1)", "float(10 * (rank + 1))")).raise_on_failure()
    print(f"warm cell with a kernel launch: {1e3 * (time.perf_counter() - started):.1f} ms")
    assert [float(t[0]) for t in wb.pull("received")] == [10 * v for v in expected(WORLD)]


TRACED_RING = """
@triton.jit
def ring(context, tile, inbox, ready, rank: tl.constexpr, world: tl.constexpr, N: tl.constexpr):
    dctx = DeviceContext.initialize(context, rank, world, tracing=True)
    right = (rank + 1) % world
    offs = tl.arange(0, N)
    dctx.put(tile + offs, inbox + offs, right)
    dctx.atomic_xchg(ready, 1, right, sem="release", scope="sys")
    while dctx.atomic_cas(ready, 1, 1, rank, sem="acquire", scope="sys") != 1:
        pass
    y = dctx.load(inbox + offs, rank)

tile = ctx.full((1024,), float(rank), name="tile")
inbox = ctx.zeros(1024, name="inbox")
ready = ctx.zeros(1, dtype=torch.int32)
ctx.barrier()
ring[(1,)](ctx.get_device_context(), tile, inbox, ready, rank, world_size, N=1024)
ctx.barrier()
"""


def test_traced_cell_gives_a_timeline_with_each_release_seen(shell, monkeypatch, tmp_path):
    from workbench.widgets.timeline import TimelineView

    shown = []
    monkeypatch.setattr("workbench.magics.display", shown.append)
    result = shell.run_cell(f"%%iris_kernel --trace --timeout 120\n{TRACED_RING}", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    (view,) = [d for d in shown if isinstance(d, TimelineView)]
    timeline = view.timeline
    assert {s.rank for s in timeline.spans} == set(range(WORLD)) and timeline.backend == "cuda"
    assert sorted((a.source.rank, a.sink.rank) for a in timeline.arrows) == [(r, (r + 1) % WORLD)
                                                                             for r in range(WORLD)]
    put = next(s for s in timeline.spans if s.name == "put" and s.rank == 0)
    assert put.location == "inbox[0]" and put.payload == 4096
    assert 0 < timeline.end - timeline.start < 1e6, timeline.text()  # µs: well under a second on GPUs
    print(view.summary())
    shell.run_line_magic("iris", f"timeline --save {tmp_path / 'gpu_ring.json'}")
    assert (tmp_path / "gpu_ring.json").stat().st_size > 0


LAYOUTLESS_WITHOUT_CTX = """
@gluon.jit
def double(src, out, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)              # no layout, and no IrisDeviceCtx call to anchor it
    gl.store(out + offs, gl.load(src + offs) * 2)

x = ctx.ones(64)
y = ctx.zeros(64)
double[(1,)](x, y, 64)
"""


def test_gluon_layout_failure_in_a_cell_gives_advice(shell):
    report = workbench.current().run(LAYOUTLESS_WITHOUT_CTX, timeout=120)
    assert report.ranks_with("error") == list(range(WORLD)), report.render()
    for result in report.results.values():
        message = result.error["message"]  # where, in the cell (line 4: the range), then what to write
        assert "<iris-cell-" in message and ":4:" in message and "gl.CoalescedLayout()" in message, message
        assert "Failed to infer return type" in result.stderr, result.stderr  # MLIR's own words, in the cell


NCCL_GROUP = """
import torch.distributed as dist
_nccl = dist.new_group(backend="nccl")
_t = torch.full((1024,), float(rank + 1), device=ctx.device)
dist.all_reduce(_t, group=_nccl)
torch.cuda.synchronize()
nccl_sum = float(_t[0])
dist.destroy_process_group(_nccl)
"""


@pytest.mark.skipif(torch.cuda.device_count() < WORLD, reason="NCCL refuses two ranks on one GPU")
def test_nccl_group_made_in_a_cell_meets_through_the_private_rendezvous_on_loopback(shell):
    """The lessons' baselines make NCCL groups in cells: their unique id travels through the cluster's FileStore,
    and NCCL's sockets, like gloo's, listen on loopback only (docs/classroom.md)."""
    from workbench.classroom_check import describe

    wb = workbench.current()
    report = wb.run(NCCL_GROUP, timeout=120)
    assert report.ok, report.render()
    assert wb.pull("nccl_sum") == [float(WORLD * (WORLD + 1) // 2)] * WORLD
    listeners = describe(wb)["tcp_listeners"]
    assert listeners and all(host == "::1" or host.startswith("127.") for host, _, _ in listeners), listeners


def test_a_stepped_cell_on_gpu_ranks_is_refused_saying_what_to_do_instead(shell):
    with pytest.raises(workbench.WorkbenchError, match="cannot be paused between ranks.*--backend cpu.*--trace"):
        shell.run_cell_magic("iris_kernel", "--step", "x = ctx.zeros(4)")
    assert workbench.current().run("y = 1").ok, "nothing was left running"


def test_stop_is_one_line_and_every_engine_exits_0(shell):  # last: it stops the ranks of this module
    report = workbench.current().stop()
    assert report.ok and str(report).count("\n") == 0, str(report)
    assert "each exited with status 0" in str(report), str(report)
