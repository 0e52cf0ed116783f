"""GEMM + communication ops (iris.ops, ctx.ops) on the CPU backend, 2 and 3 real ranks, against torch references:
every op with odd shapes, bias, fp32 and bf16, inputs intact, workspaces reused, the path it took; and what a
user is told for what the ops do not take. Both paths run here (the chunked one without streams).
"""

from __future__ import annotations

import inspect

import pytest

import iris

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
    assert "writes only this rank's column block, out of shape (M, N / world) = (4, 2)" in (
        messages["full_size_reduce_scatter"])
    assert "N must be a multiple of the world size" in messages["indivisible_n"]
    assert "A's columns must be B's rows" in messages["inner_dims"]
    assert messages["wrong_out"].startswith("ValueError: rank 0: matmul_all_reduce: out must be [4, 4]")
    assert "float16, bfloat16 or float32" in messages["int_dtype"]
    assert "use one dtype" in messages["mixed_dtypes"]
    assert "K = world x the shard's columns" in messages["gathered_k"]
    assert "bias must be [4]" in messages["bias_shape"]
    assert messages["fused_variant"].startswith("NotImplementedError: FusedConfig variant 'fused'")
    assert messages["zero_pieces"] == "ValueError: FusedConfig chunks must be an int >= 1 or None, got 0"


def test_pieces_follow_the_shape():
    """Pieces of at least 512 rows and 4M elements, at most 4 (2 for matmul_reduce_scatter and
    all_gather_matmul); 2 ranks, where auto stays sequential on the CPU."""
    rule = run_ranks(2, f"{CASES}:shape_rule")[0]["rule"]
    assert rule["matmul_all_reduce (2048, 8192)"] == [["sequential", 2], ["chunked", 2]]  # row blocks of 1024
    assert rule["matmul_all_reduce (8192, 4096)"] == [["sequential", 4], ["chunked", 4]]
    assert rule["matmul_reduce_scatter (2048, 8192)"] == [["sequential", 2], ["chunked", 2]]  # at most 2
    assert rule["matmul_all_gather (2048, 8192)"] == [["sequential", 2], ["chunked", 2]]  # 1024 rows per rank
    assert rule["all_gather_matmul (8192, 4096)"] == [["sequential", 2], ["chunked", 2]]  # at most 2
    assert rule["matmul_all_reduce (300, 64)"] == [["sequential", 1], ["chunked", 1]]
    assert rule["given"] == ["sequential", 3]


def test_views_as_inputs_and_alternating_shapes():
    errors = run_ranks(2, f"{CASES}:odd_layouts")[0]["errors"]
    assert all(error < 1e-4 for error in errors.values()), errors

