"""GEMM + communication ops (iris.ops, ctx.ops) on the CPU backend, 2 and 3 real ranks, against torch references:
every op with odd shapes, bias, fp32 and bf16, inputs intact, workspaces reused, the path it took; and what a
user is told for what the ops do not take. Both paths run here (the chunked one without streams).
"""

from __future__ import annotations

import inspect
import itertools
import types
import warnings

import pytest
import torch

import iris
from iris.ops import chunked, pieces

from .multirank import run_ranks

CASES = "tests.rank_cases_ops"

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def test_upstream_signatures():
    for name in ("matmul_all_reduce", "matmul_all_gather", "matmul_reduce_scatter"):
        assert list(inspect.signature(getattr(iris.ops.namespace.Ops, name)).parameters) == [
            "self", "out", "A", "B", "bias", "async_op", "config", "workspace"], name
    assert list(inspect.signature(iris.ops.namespace.Ops.all_gather_matmul).parameters)[1:4] == [
        "out", "A_sharded", "B"]
    assert list(inspect.signature(iris.ops.matmul_all_reduce).parameters)[:4] == ["ctx", "out", "A", "B"]


@pytest.mark.parametrize("world, shape, dtypes", [
    (2, (13, 7, 6), ["float32", "bfloat16"]),   # M, K odd; N a multiple of the world size
    (3, (5, 9, 6), ["float32"]),
    (1, (5, 9, 6), ["float32"]),                # one rank: nobody pushes, the own block is all there is
])
def test_every_op_matches_torch(world, shape, dtypes):
    results = run_ranks(world, f"{CASES}:every_op", *shape, dtypes)
    assert [r["paths"] for r in results] == [["chunked", "sequential"]] * world
    assert [r["replays"] for r in results] == [0] * world  # CUDA graphs are for GPUs


def test_errors_say_what_and_what_to_do():
    (first, _) = run_ranks(2, f"{CASES}:errors")
    messages = first["messages"]
    assert all(message is not None for message in messages.values()), messages
    assert "a tile of block_size_m x block_size_n = 2048 x 1024 is over Triton's 1048576 elements" in (
        messages["full_out_tile_too_large"])
    assert "N must be a multiple of the world size" in messages["indivisible_n"]
    assert "A's columns must be B's rows" in messages["inner_dims"]
    assert messages["wrong_out"].startswith("ValueError: rank 0: matmul_all_reduce: out must be [4, 4]")
    assert "float16, bfloat16 or float32" in messages["int_dtype"]
    assert "use one dtype" in messages["mixed_dtypes"]
    assert "K = world x the shard's columns" in messages["gathered_k"]
    assert "bias must be [4]" in messages["bias_shape"]
    assert messages["fused_variant"].startswith("NotImplementedError: FusedConfig variant 'fused'")
    assert messages["zero_pieces"] == "ValueError: FusedConfig chunks must be an int >= 1 or None, got 0"
    assert messages["zero_growth"].startswith("ValueError: FusedConfig growth must be a number > 0")


def test_a_tensor_on_another_device_is_named_before_torch_stops():
    """A bias (or any tensor argument) on another device stopped inside torch ("Expected all tensors to be on the
    same device"); each is named first: the argument, its device, the device expected, the rank."""
    for result in run_ranks(2, f"{CASES}:misplaced_tensors"):
        rank, device, raised = result["rank"], result["device"], result["raised"]
        assert len(raised) == 4 * 4 + 3 + 2 + 3 + 2 + 1, sorted(raised)  # every tensor argument of each
        for what, (op, message) in raised.items():
            name = what.split()[-1]
            assert message == (f"rank {rank}: {op}: {name} is on meta, but this rank's tensors must be on its "
                                f"device, {device}: move it there ({name}.to(ctx.device))"), (what, message)


def test_pieces_follow_the_shape():
    """Pieces of at least 512 rows and 4M elements on average, at most 3 for matmul_all_reduce and
    matmul_all_gather, 2 for matmul_reduce_scatter and all_gather_matmul, each op's growth (all_gather_matmul's
    even where its first piece would be thin); 2 ranks, where auto stays sequential on the CPU."""
    rule = run_ranks(2, f"{CASES}:shape_rule")[0]["rule"]
    g = pieces.GROWTH
    assert rule["matmul_all_reduce (2048, 8192)"] == [["sequential", 2, g["matmul_all_reduce"]],
                                                      ["chunked", 2, g["matmul_all_reduce"]]]  # row blocks of 1024
    assert rule["matmul_all_reduce (8192, 4096)"] == [["sequential", 3, g["matmul_all_reduce"]],
                                                      ["chunked", 3, g["matmul_all_reduce"]]]  # at most 3
    assert rule["matmul_reduce_scatter (2048, 8192)"] == [["sequential", 2, g["matmul_reduce_scatter"]],
                                                          ["chunked", 2, g["matmul_reduce_scatter"]]]  # at most 2
    assert rule["matmul_all_gather (2048, 8192)"] == [["sequential", 2, g["matmul_all_gather"]],
                                                      ["chunked", 2, g["matmul_all_gather"]]]  # 1024 rows per rank
    assert rule["all_gather_matmul (8192, 4096)"] == [["sequential", 2, g["all_gather_matmul"]],
                                                      ["chunked", 2, g["all_gather_matmul"]]]  # at most 2
    # its growing cut's first piece would be 512 rows, under pieces.FIRST_ROWS: even
    assert rule["all_gather_matmul (2048, 8192)"] == [["sequential", 2, 1.0], ["chunked", 2, 1.0]]
    assert rule["matmul_all_reduce (300, 64)"] == [["sequential", 1, g["matmul_all_reduce"]],
                                                   ["chunked", 1, g["matmul_all_reduce"]]]
    assert rule["given"] == ["sequential", 3, 2.0]


def test_more_ranks_push_in_turn_and_cut_by_the_ratio_of_gemm_to_transfer(monkeypatch):
    """The rules that depend on the world size (iris.ops.pieces's module doc), by choose_path on a stand-in
    H200 context: 2-rank cuts of benchmarks/fused_ops.py's shapes as measured; at 4 ranks the reductions' peer
    blocks pipeline at M = 2048, matmul_all_reduce cuts 2 even pieces, and a pushing pipeline's pieces shrink no
    faster than its transfers follow."""
    assert [chunked.peers_in_turn(rank, 4) for rank in range(4)] == [[1, 2, 3], [2, 3, 0], [3, 0, 1], [0, 1, 2]]
    assert chunked.peers_in_turn(1, 2) == [0] and chunked.peers_in_turn(0, 1) == []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")

    def cut(world, op, m, n, k):
        ctx = types.SimpleNamespace(num_ranks=world, backend="cuda", get_device=lambda: 0, cur_rank=0,
                                    get_cu_count=lambda: 132)
        depth = k // world if op in pieces.REDUCING else k  # the reductions' A and B are split along K
        columns = n // world if op == "matmul_reduce_scatter" else n  # out's
        B = torch.empty(depth, n, device="meta", dtype=torch.bfloat16)
        path, count, growth = iris.ops.choose_path(ctx, op, (m, columns), iris.ops.FusedConfig(), B)
        rows = pieces.cut_rows(op, m, world)
        return path, [piece.stop - piece.start for piece in pieces.split(slice(None), rows, count, growth)]

    assert cut(2, "matmul_all_reduce", 8192, 8192, 8192) == ("chunked", [2304, 1152, 640])
    assert cut(2, "matmul_all_gather", 8192, 8192, 28672) == ("chunked", [3584, 512])
    assert cut(2, "matmul_reduce_scatter", 2048, 8192, 8192) == ("chunked", [1024, 1024])
    assert cut(4, "matmul_reduce_scatter", 2048, 8192, 8192) == ("chunked", [2048])  # was sequential
    assert cut(4, "matmul_all_reduce", 2048, 8192, 28672) == ("chunked", [512])
    assert cut(4, "matmul_all_gather", 2048, 8192, 8192) == ("sequential", [512])  # one piece: nothing overlaps
    # matmul_all_reduce at more than 2 ranks: 2 even pieces (4x H200: 717 against 769 µs for 3 at 8192^3)
    assert cut(4, "matmul_all_reduce", 8192, 8192, 8192) == ("chunked", [1024, 1024])
    assert cut(4, "matmul_all_reduce", 8192, 8192, 28672) == ("chunked", [1024, 1024])
    assert cut(3, "matmul_all_reduce", 8192, 8192, 8192) == ("chunked", [1366, 1365])
    assert pieces.growth("matmul_all_reduce", 2048, 3, hiding=0.38) == 1.0  # transfers outlast GEMMs: even
    assert cut(4, "matmul_all_gather", 8192, 8192, 8192) == ("chunked", [1024, 512, 512])
    assert cut(4, "matmul_reduce_scatter", 512, 64, 64) == ("sequential", [512])  # too small to pipeline
    # lesson 13's shape: too shallow for the chunked path; at 4 ranks a GEMM of 2048^3 a rank, small enough for the
    # one-kernel path; at 2 ranks twice as deep, where cuBLAS's GEMM wins
    assert cut(4, "matmul_reduce_scatter", 2048, 2048, 8192) == ("peers_first", [2048])
    assert cut(4, "matmul_reduce_scatter", 1024, 1024, 4096) == ("peers_first", [1024])  # 64 programs: won
    assert cut(2, "matmul_reduce_scatter", 2048, 2048, 8192) == ("sequential", [2048])
    # a shallow GEMM whose blocks are large: matmul_reduce_scatter's one push a block paid (4x H200: 130 against 157)
    assert cut(4, "matmul_reduce_scatter", 4096, 4096, 4096) == ("chunked", [4096])
    # lesson 15's shape: a GEMM too short to hide the copy engines' pushes (4x H200: 233 µs chunked, 200 sequential)
    assert cut(4, "matmul_all_reduce", 4096, 4096, 4096) == ("sequential", [1024])
    assert pieces.growth("matmul_all_gather", 4096, 3, hiding=None) == pieces.GROWTH["matmul_all_gather"]
    assert pieces.growth("matmul_reduce_scatter", 4096, 2, hiding=0.1) == pieces.GROWTH["matmul_reduce_scatter"]


@pytest.mark.parametrize("world", [2, 3, 8])  # 8: the world size whose GPUs are not lent, on CPU ranks
def test_matmul_reduce_scatter_in_one_kernel_peers_first(world):
    light = world > 2  # one shape in one dtype at 3 and 8 ranks: the world size is what those runs are for
    results = run_ranks(world, f"{CASES}:peers_first_path", light, timeout=300)
    checks = (1 if light else 2 * 2) * 2 + 3  # shapes x dtypes x (bias, heap) + 3 calls
    assert all(r["checked"] == checks for r in results), results
    refusal = "variant='peers_first') is matmul_reduce_scatter's one-kernel path"
    assert all(refusal in r["refused"] for r in results), results


def test_matmul_reduce_scatter_in_one_kernel_has_no_race():
    results = run_ranks(3, f"{CASES}:peers_first_under_the_race_checker", timeout=300)
    assert all(r["races"] == [] for r in results), [r["races"] for r in results]


@pytest.mark.parametrize("world", [2, 3])
def test_one_piece_a_block_reduces_as_the_sequential_path(world):
    for result in run_ranks(world, f"{CASES}:one_piece_a_block"):
        assert all(error < 1e-4 for error in result["errors"].values()), result["errors"]


@pytest.mark.parametrize("length, count, growth", [
    (4096, 4, 0.5), (4096, 3, 0.5), (8192, 2, 16.0), (8192, 3, 4.0), (2048, 2, 0.5), (1000, 3, 0.5), (9, 4, 2.0),
    (0, 2, 0.5), (5000, 4, 1.0), (100_000, 4, 0.25), (1536, 3, 3.0), (4096, 4, 1e300), (100_000, 40, 1e-300)])
def test_piece_sizes_cover_the_rows_once_in_order_and_grow_as_asked(length, count, growth):
    sizes = pieces.sizes(length, count, growth)
    assert len(sizes) == count and sum(sizes) == length and min(sizes) >= 0
    if length < count * pieces.PIECE_ROWS or growth == 1.0:  # even, the last ones short or empty
        assert max(sizes) - min(sizes) <= -(-length // count) and sizes == sorted(sizes, reverse=True)
    else:
        assert min(sizes) >= pieces.PIECE_ROWS
        largest = 0 if growth < 1 else count - 1
        assert all(size % pieces.ALIGN == 0 for c, size in enumerate(sizes) if c != largest)  # whole tiles
        assert sizes == sorted(sizes, reverse=growth < 1)
    slices = pieces.split(slice(3, 3 + length), length + 10, count, growth)
    assert [s.stop - s.start for s in slices] == sizes and slices[0].start == 3 and slices[-1].stop == 3 + length
    assert all(a.stop == b.start for a, b in itertools.pairwise(slices))
    aligned = pieces.split(slice(3, 3 + length), length + 10, count, growth, align=pieces.ALIGN)
    assert len(aligned) == count and aligned[0].start == 3 and aligned[-1].stop == 3 + length
    assert all(a.stop == b.start and (a.stop - 3) % pieces.ALIGN == 0 for a, b in itertools.pairwise(aligned))
    assert all(abs(a.stop - s.stop) <= pieces.ALIGN // 2 for a, s in zip(aligned, slices, strict=True))


def test_piece_sizes_are_exact_where_the_floor_allows():
    assert pieces.sizes(4096, 4, 0.5) == [2048, 1024, 512, 512]  # the last one held at 512 rows
    assert pieces.sizes(8192, 2, 16.0) == [512, 7680]
    assert pieces.sizes(2048, 2, 0.5) == [1408, 640]  # 1365 and 683 in whole tiles, the rest to the largest
    assert pieces.sizes(1024, 2, 0.5) == [512, 512]  # 341 rows would be under the floor
    assert pieces.sizes(1000, 3, 0.5) == [334, 334, 332]  # too short for 3 x 512: even
    assert pieces.sizes(4096, 4, 1e300) == [512, 512, 512, 2560]  # (no overflow: weights relative to the largest)
    with pytest.raises(ValueError, match="whole number of 128-row tiles"):
        pieces.sizes(4096, 4, 0.5, least=100)


def test_a_deep_gemm_pushes_in_two_pieces_whose_last_hides_the_rest():
    hiding = pieces.transfer_hiding("NVIDIA H200", torch.bfloat16, depth=28672, world=2)
    assert 15 < hiding < 17  # a row computes ~16 times longer than it takes to push
    for rows in (1024, 4096, 8192):
        count, growth = pieces.last_piece_hides_the_rest("matmul_all_gather", rows, 8192, hiding)
        assert count == 2 and pieces.sizes(rows, count, growth) == [rows - 512, 512]
    assert pieces.last_piece_hides_the_rest("matmul_all_reduce", 4096, 8192, hiding) == (2, 512 / 3584)
    shallow = pieces.transfer_hiding("NVIDIA H200", torch.bfloat16, depth=8192, world=2)
    # 3584 rows' push outlasts a 512-row GEMM at K = 8192
    assert pieces.last_piece_hides_the_rest("matmul_all_gather", 4096, 8192, shallow) is None
    assert pieces.last_piece_hides_the_rest("matmul_all_gather", 2048, 8192, shallow) == (2, 512 / 1536)
    # all_gather_matmul's first piece waits instead: it keeps its own rule
    assert pieces.last_piece_hides_the_rest("all_gather_matmul", 4096, 8192, 1e6) is None
    assert pieces.last_piece_hides_the_rest("matmul_all_gather", 900, 8192, 1e6) is None  # too short for 2 x 512
    assert pieces.last_piece_hides_the_rest("matmul_all_gather", 4096, 8, 1e6) is None  # too small to pipeline
    assert pieces.transfer_hiding("NVIDIA H200", torch.bfloat16, 28672, world=4) == pytest.approx(hiding / 3)
    assert pieces.transfer_hiding("NVIDIA H200", torch.bfloat16, 28672, world=1) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unknown GPU keeps the plain rule, silently
        assert pieces.transfer_hiding("NVIDIA GeForce RTX 4090", torch.bfloat16, 28672, world=2) is None
    tf32 = pieces.transfer_hiding("NVIDIA H200", torch.float32, 28672, world=2, tf32=True)
    fp32 = pieces.transfer_hiding("NVIDIA H200", torch.float32, 28672, world=2)
    assert fp32 == pytest.approx(tf32 * 494.5 / 67.0)  # the peak the GEMM runs at: TF32's where torch allows it


@pytest.mark.parametrize("world", [2, 3])
def test_pieces_that_grow_or_shrink_compute_what_the_sequential_path_does(world):
    results = run_ranks(world, f"{CASES}:uneven_pieces")
    for result in results:
        assert all(error < 1e-4 for error in result["errors"].values()), result["errors"]
    cuts = results[0]["cuts"]
    assert cuts["1600 3 x0.5"] == [576, 512, 512] and cuts["1600 3 x3"] == [512, 512, 576]
    assert cuts["1600 2 x16"] == [512, 1088]  # all_gather_matmul's first piece: the floor
    assert cuts[f"{1600 * world} 3 x0.5"][0] > 2 * 512
    assert all(result["cuts"] == cuts for result in results)  # every rank cuts the same way


def test_views_as_inputs_and_alternating_shapes():
    errors = run_ranks(2, f"{CASES}:odd_layouts")[0]["errors"]
    assert all(error < 1e-4 for error in errors.values()), errors



def test_all_gather_matmul_ranks_agree_on_the_gathered_layout():
    """The gathered A is column-major only where every rank's shard was when the workspace was made (a peer
    writes into a rank's buffer in the layout it stores); a warm workspace called with the other layout gives the
    same product. (The 300 rows go in 3 pieces whose boundaries move to whole 128-row tiles, as the piece-size test
    checks: a first piece of 128 rows, then 128, then 44.)"""
    for results in run_ranks(2, f"{CASES}:gathered_layouts"):
        layouts = {name: layout for name, (layout, _) in results.items()}
        assert layouts == {"columns everywhere": "columns", "columns everywhere, then rows on the last rank": "columns",
                           "columns on rank 0": "rows", "columns on rank 0, then columns everywhere": "rows"}, layouts
        assert all(error < 1e-4 for _, error in results.values()), results


def test_all_gather_matmul_rounds_each_element_once():
    """Each element of all_gather_matmul's product is one fp32 sum over the whole K, rounded once: shards whose
    terms cancel (+1000 and -1000 + x) give x exactly in bf16 on every path. (The chunked path's first piece used to
    sum per-shard terms rounded to bf16: 2-4 ulps off, found by upstream's test_all_gather_matmul_hbm_buffer.)"""
    for errors in run_ranks(2, f"{CASES}:gathered_product_rounded_once"):
        assert errors == {"sequential": 0.0, "chunked, thin first piece": 0.0, "chunked, even": 0.0,
                          "chunked, thin first piece, column-major": 0.0}, errors


def test_a_call_interrupted_while_queueing_is_not_trusted_again():
    first, second = run_ranks(2, f"{CASES}:interrupted_call")
    assert first["interrupted"] and not second["interrupted"]
    assert first["refused"].startswith("rank 0: an earlier call of matmul_all_gather stopped"), first["refused"]
    assert "ctx.ops.release_workspaces() on every rank" in first["refused"]
    assert first["error"] < 1e-4 and second["error"] < 1e-4, (first, second)
