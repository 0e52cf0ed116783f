"""The traffic matrix (iris.traffic) on the CPU backend, 2 real ranks: byte counts equal hand counts for load,
store, get, put, copy and every atomic, masked, over several programs, at remote and local heaps, through
DeviceContext and the functional API, beside the race checker; the observer gone after recording; the minimum
of common collectives; a trace read as a matrix; and a workbench cell with ``--traffic``.

The kernels and the recording run in tests/rank_cases_traffic.py; the hand count is here.
"""

from __future__ import annotations

import numpy as np
import pytest

import iris
from iris.instruments.traffic import TrafficMatrix, minimum

from .multirank import ROOT, run_ranks
from .rank_cases_traffic import BLOCK, GRID, VALID

CASES = "tests.rank_cases_traffic"
WORLD = 2
LANE = 4  # float32 and int32: bytes per lane
MASKED = VALID * LANE  # what one masked operation moves

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def hand_count(target_of) -> dict:
    """The bytes of one all_ops launch on every rank, per (issuer, heap, kind), with ``target_of(rank)`` the
    rank its operations name, counted by hand from the kernel's source (per program, times GRID):

    * load: at the target, ``load``, ``get``, ``copy`` from the target: 3 masked; at its own heap, ``put``'s
      and ``copy``-to-target's reads of the local source: 2 masked;
    * store: at the target, ``store``, ``put``, ``copy`` to the target: 3; at its own heap, ``get``'s and
      ``copy``-from-target's writes into the local destination: 2;
    * atomic, at the target: 8 masked atomics (``atomic_sub`` counted under ``atomic_add``, as the interpreter
      sees it) and a compare-and-swap of the whole block, which fails on every lane and counts all the same.
    """
    expected = np.zeros((WORLD, WORLD, 3), dtype=np.int64)
    ops = {name: np.zeros((WORLD, WORLD), dtype=np.int64) for name in
           ("atomic_add", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_min", "atomic_max",
            "atomic_cas")}
    for rank in range(WORLD):
        target = target_of(rank)
        for _ in range(GRID):
            expected[rank, target, 0] += 3 * MASKED
            expected[rank, rank, 0] += 2 * MASKED
            expected[rank, target, 1] += 3 * MASKED
            expected[rank, rank, 1] += 2 * MASKED
            for name in ops:
                ops[name][rank, target] += {"atomic_add": 2 * MASKED, "atomic_cas": BLOCK * LANE}.get(name, MASKED)
            expected[rank, target, 2] += 8 * MASKED + BLOCK * LANE
    return {"bytes": expected.tolist(), "atomic_ops": {name: counts.tolist() for name, counts in ops.items()}}


REMOTE = hand_count(lambda rank: (rank + 1) % WORLD)
LOCAL = hand_count(lambda rank: rank)


def test_byte_counts_equal_hand_counts():
    results = run_ranks(WORLD, f"{CASES}:hand_counted")
    assert results[0]["matrices"] == results[1]["matrices"]  # the matrix is gathered: every rank has it all
    first = results[0]
    launches = first["matrices"]
    # device_context at the peer, then locally; the functional API the same
    assert [m["kernel"] for m in launches] == ["all_ops", "all_ops", "functional_all_ops", "functional_all_ops"]
    for matrix, want in zip(launches, [REMOTE, LOCAL, REMOTE, LOCAL], strict=True):
        assert matrix["bytes"] == want["bytes"], matrix["kernel"]
        assert matrix["atomic_ops"] == want["atomic_ops"], matrix["kernel"]
        assert all(o[0] > 0 for o in matrix["outside"])  # the device context's heap bases: a plain tensor
    summed = np.sum([np.array(m["bytes"]) for m in launches], axis=0)
    assert first["all"]["bytes"] == summed.tolist()
    assert first["all"]["kernel"] == "all_ops + functional_all_ops"
    # What crossed from rank a to b at the peer launch: a's stores and atomics at b, b's loads from a.
    remote = np.array(REMOTE["bytes"])
    assert launches[0]["crossing"] == [[0, remote[0, 1, 1] + remote[0, 1, 2] + remote[1, 0, 0]],
                                       [remote[1, 0, 1] + remote[1, 0, 2] + remote[0, 1, 0], 0]]
    assert np.array(launches[1]["crossing"]).sum() == 0  # all local
    # one operation per call per program: 3 loads, 3 stores and 9 atomics at the target
    assert launches[0]["operations"][0][1] == [3 * GRID, 3 * GRID, 9 * GRID]
    assert all(r["observer_removed"] and r["removed_after_error"] for r in results)
    assert all(r["launches_after"] == 4 for r in results)  # the launch after the block was not counted
    assert "crossed ranks" in first["text"] and "the minimum" in first["text"]
    assert all("no launch 0 on every rank" in r["missing_launch"] and "rank 1: 0" in r["missing_launch"]
               for r in results)
    # beside the race checker, the same counts (and the checker saw the kernel's unordered accesses)
    assert all(r["checked_matrices"] == launches and r["races"] > 0 for r in results)


def test_minimum_of_common_operations():
    assert minimum.all_gather(100, 3).tolist() == [[0, 100, 100], [100, 0, 100], [100, 100, 0]]
    assert minimum.reduce_scatter(300, 3)[0].tolist() == [0, 100, 100]
    assert minimum.all_to_all(400, 4)[1].tolist() == [100, 0, 100, 100]
    assert minimum.all_reduce(400, 4)[2].tolist() == [200, 200, 0, 200]  # 2 N / world to each peer
    assert minimum.all_reduce(400, 4, algorithm="one_shot")[3].tolist() == [400, 400, 400, 0]
    with pytest.raises(ValueError, match="do not split into 3"):
        minimum.reduce_scatter(100, 3)
    with pytest.raises(ValueError, match="algorithm='ring'"):
        minimum.all_reduce(400, 4, algorithm="ring")


def _traced(name, rank, target, payload):
    return {"name": name, "ph": "X", "ts": 0.0, "dur": 0.1, "pid": rank,
            "args": {"target_rank": target, "payload_size": payload, "program_id": 0}}


def test_matrix_from_a_trace_counts_what_events_record():
    events = [_traced("put", 0, 1, 512), _traced("get", 1, 0, 256), _traced("copy", 0, 1, 64),
              _traced("atomic_cas", 1, 0, 4), _traced("atomic_add", 0, 0, 8), _traced("compute", 0, 0, 4096),
              {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "Rank 0"}}]
    m = TrafficMatrix.from_trace({"traceEvents": events, "metadata": {"world_size": 2}})
    assert m.source == "trace" and m.kernel == "traced kernels (all launches)"
    assert m.bytes[0, 1].tolist() == [0, 576, 0] and m.bytes[1, 0].tolist() == [256, 0, 4]
    assert m.bytes[0, 0].tolist() == [0, 0, 8]  # compute events move nothing
    assert m.atomic_ops["atomic_cas"].tolist() == [[0, 0], [4, 0]]
    assert m.crossing().tolist() == [[0, 576 + 256], [4, 0]]
    assert m.total(remote_only=True) == 576 + 256 + 4 and m.total("atomic") == 12
    shown = m.with_minimum(minimum.all_gather(416, 2))
    assert shown.ratio() == (576 + 256 + 4) / 832
    assert "836 B crossed ranks, 832 B needed (1.00× the minimum)" in shown.to_text()
    assert "832 B / 416 B (2.00× the minimum)" in shown.to_text() and "<table" in shown.to_html()
    with pytest.raises(ValueError, match=r"a \(2, 2\) matrix"):
        m.with_minimum(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="outside a world of 2"):
        TrafficMatrix.from_trace({"traceEvents": [_traced("put", 0, 5, 4)], "metadata": {"world_size": 2}})


def test_the_view_says_its_title_once_with_its_label():
    """The headline is the traffic view's one title (its tables come without it; a matrix shown alone keeps it),
    and names what the caller called it beside the kernel (lesson 15's one_shot and two_shot, one kernel)."""
    from dataclasses import replace

    from iris.instruments.traffic.launch import LaunchTraffic
    from workbench.widgets.static import static_html
    from workbench.widgets.traffic_view import TrafficView

    a, b = LaunchTraffic.empty("gemm_all_reduce", 0, 2), LaunchTraffic.empty("gemm_all_reduce", 1, 2)
    a.add("store", 1, 256)
    b.add("load", 0, 256)
    matrix = replace(TrafficMatrix.from_launches([[a], [b]]), label="one_shot").with_minimum(512)
    headline = matrix.headline()
    assert headline.startswith("traffic of gemm_all_reduce (one_shot) on 2 ranks: 512 B crossed ranks")
    assert headline not in matrix.tables_html() and matrix.to_html().count(headline) == 1
    page = static_html(TrafficView(matrix))
    assert page.count(headline) == 1 and page.count("counted by the CPU interpreter") == 1
    assert page.count("<svg") == 4 and page.count("<table") == 4  # a heat map and a table per kind, and crossed


def test_iris_names_it():
    assert iris.traffic.record and iris.traffic.TrafficMatrix is TrafficMatrix
    assert iris.traffic.KINDS == ("load", "store", "atomic")


PUT_CELL = """
@triton.jit
def put_to_next(src, dst, rank: tl.constexpr, world: tl.constexpr, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < 100
    iris.put(src + offs, dst + offs, rank, (rank + 1) % world, heap_bases, mask=mask)

src = ctx.full((128,), float(rank))
dst = ctx.zeros(128)
ctx.barrier()
put_to_next[(4,)](src, dst, rank, world_size, ctx.get_heap_bases(), BLOCK=32)
put_to_next[(4,)](src, dst, rank, world_size, ctx.get_heap_bases(), BLOCK=32)
ctx.barrier()
"""


@pytest.mark.slow
def test_workbench_cell_with_traffic(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    import workbench
    from workbench.report import RankError
    from workbench.widgets.traffic_view import TrafficView

    shown = []
    monkeypatch.setattr("workbench.magics.display", shown.append)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    shell.run_line_magic("iris", "start -n 2 --backend cpu --heap 16MiB --timeout 120")
    try:
        result = shell.run_cell(f"%%iris_kernel --traffic 'two puts'\n{PUT_CELL}", store_history=False)
        assert result.error_in_exec is None, result.error_in_exec
        views = [v for v in shown if isinstance(v, TrafficView)]
        assert len(views) == 1
        matrix = views[0].matrix
        put = 100 * LANE  # 100 lanes of 128 unmasked, per launch: read here, written at the next rank
        assert matrix.kernel == "put_to_next" and matrix.source == "interpreter"
        assert matrix.headline().startswith("traffic of put_to_next (two puts) on 2 ranks")  # its label, quoted
        assert matrix.bytes[:, :, 1].tolist() == [[0, 2 * put], [2 * put, 0]]
        assert matrix.bytes[:, :, 0].tolist() == [[2 * put, 0], [0, 2 * put]]
        bundle = views[0]._repr_mimebundle_()
        assert "<svg" in bundle["text/html"] and "crossed ranks" in bundle["text/plain"]
        # the recorder is gone from the ranks once the cell is over (the hang report's observer stays)
        observers = workbench.current().pull("[type(o).__name__ for o in iris.interpret.access_events._observers]")
        assert all("TrafficRecorder" not in names for names in observers), observers
        shown.clear()
        shell.run_line_magic("iris", f"traffic --launch 0 --need 2*{put}")  # both ranks' shards cross once
        again = shown[0].matrix
        assert again.bytes[0, 1, 1] == put and again.ratio() == 1.0 and "1.00× the minimum" in again.to_text()
        shell.run_line_magic("iris", "traffic --launch 1 --label second")
        assert shown[1].matrix.headline().startswith("traffic of put_to_next (second) on 2 ranks")
        second = workbench.traffic(need=minimum.all_gather(put, 2), launch=1).matrix
        assert second.bytes[1, 0, 1] == put and "400 B / 400 B (1.00× the minimum)" in second.to_text()
        with pytest.raises(RankError, match="no launch 5 on every rank"):
            workbench.traffic(launch=5)
    finally:
        workbench.current().stop()


def test_lesson_13_first_kernel_sends_each_tile_once(tmp_path):
    """Issue 27 expected lesson 13's first all-gather + GEMM kernel to move many times what an all-gather needs.
    It does not, across ranks: each row tile is stored into each peer's A once (plus a 4-byte flag per tile and
    the polls of it). What it does move many times is local: every column tile's program reads the whole
    gathered A again from its own heap, so the heap loads are N_TILES times A (and the lesson's remedy lies in
    how the GEMM is tiled and overlapped, not in sending less)."""
    from benchmarks.lesson_modules import write_lesson_modules

    write_lesson_modules(ROOT / "notebooks" / "13_sequence_parallel_ag_gemm_rs.ipynb", tmp_path)
    results = run_ranks(WORLD, f"{CASES}:lesson13_ag_gemm", str(tmp_path))
    m_local, hidden, n_tiles = 32, 32, 2  # the lesson's sizes: 64 tokens on 2 ranks, 64 columns of 32 per rank
    shard = m_local * hidden * LANE
    first = results[0]
    assert first["needed"] == WORLD * shard
    tiles = m_local // 16  # row tiles per rank: each crosses once, then its flag is raised at the peer (4 bytes)
    assert first["crossing"] == [[0, shard + 4 * tiles], [shard + 4 * tiles, 0]]
    assert 1.0 <= first["ratio"] < 1.01
    for rank in range(WORLD):  # every column tile reads all of A, gathered rows and own rows, from its own heap
        assert first["bytes"][rank][rank][0] >= n_tiles * WORLD * shard


def traced_hand_count() -> dict:
    """What the trace of one all_ops launch at the right peer records, per program (times GRID): each operation
    once, at the rank its event names, its payload the lanes not masked off; a copy at its destination (so
    ``copy(target -> own)`` is a store at the own heap), the atomic_sub under its own name."""
    expected = np.zeros((WORLD, WORLD, 3), dtype=np.int64)
    ops = {}
    for rank in range(WORLD):
        target = (rank + 1) % WORLD
        expected[rank, target] = [2 * MASKED * GRID, 3 * MASKED * GRID, (8 * MASKED + BLOCK * LANE) * GRID]
        expected[rank, rank, 1] = MASKED * GRID
        for name in ("add", "sub", "xchg", "and", "or", "xor", "min", "max", "cas"):
            counts = ops.setdefault(f"atomic_{name}", np.zeros((WORLD, WORLD), dtype=np.int64))
            counts[rank, target] = (BLOCK * LANE if name == "cas" else MASKED) * GRID
    return {"bytes": expected.tolist(), "atomic_ops": {name: c.tolist() for name, c in ops.items()}}


def test_counted_from_a_real_trace_equals_the_hand_count():
    """The GPU path (iris.traffic.from_trace) on the CPU's real trace: what a GPU run would report."""
    results = run_ranks(WORLD, f"{CASES}:traced_counts")
    want = traced_hand_count()
    for result in results:
        assert result["source"] == "trace" and result["launches"] == 1 and result["dropped"] == 0
        assert result["kernel"] == "traced kernels (all launches)"
        assert result["bytes"] == want["bytes"] and result["atomic_ops"] == want["atomic_ops"]


@pytest.mark.parametrize("world", [2, 3])
def test_rooted_collectives_and_send_move_their_minimum_and_flags(world):
    """Every byte the minimum needs crosses, and beyond it only flags (4 bytes a signal, two signals a program and
    peer at most, 2 programs on the CPU) and a send's 8-byte size word."""
    results = run_ranks(world, f"{CASES}:rooted_and_p2p_traffic", timeout=240)
    for name, found in results[0].items():
        crossed, need = np.array(found["crossed"]), np.array(found["need"])
        assert (crossed >= need).all(), f"{name}: less crossed than needed\n{found['text']}"
        assert (crossed - need <= 2 * 2 * 4 + 8).all(), f"{name}: more than flags crossed\n{found['text']}"
        assert need.sum() > 0
