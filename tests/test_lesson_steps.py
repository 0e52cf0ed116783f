"""What a CPU can check of the lessons' steps benchmarks (benchmarks/lesson11_steps.py, 12, 15) and of the peer
columns of benchmarks/allreduce.py: the code they take from the notebooks is there and computes the right thing, and
their tables say what the figures say. Their timings need GPUs (the device tool)."""

from __future__ import annotations

import ast

import pytest

from benchmarks import allreduce
from benchmarks.lesson_modules import lesson_function, write_lesson_modules
from benchmarks.results import steps_table
from tests.multirank import ROOT, run_ranks

NOTEBOOKS = ROOT / "notebooks"


@pytest.mark.parametrize("notebook, module, names", [
    ("11_moe_dispatch_combine", "moe_layer.py", {"MoELayer", "dispatch", "experts", "combine"}),
    ("12_flash_decode_across_ranks", "flash_decode_ranks.py", {"FlashDecode", "flash_decode"}),
    ("15_fused_kernels_tile_collectives", "fused_gemm.py", {"FusedGemmAllReduce", "gemm_all_reduce"}),
])
def test_each_benchmark_finds_its_lessons_module(tmp_path, notebook, module, names):
    assert module in write_lesson_modules(NOTEBOOKS / f"{notebook}.ipynb", tmp_path)
    defined = {node.name for node in ast.parse((tmp_path / module).read_text()).body
               if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    assert names <= defined, names - defined


def test_lesson_function_takes_one_definition_from_any_depth_or_says_why():
    # all_to_all_moe is defined inside the timing cell's `if`; layer_weights in the %%writefile moe_gate.py cell
    assert lesson_function(NOTEBOOKS / "11_moe_dispatch_combine.ipynb", "all_to_all_moe", {}).__name__ == \
        "all_to_all_moe"
    with pytest.raises(ValueError, match="0 definitions of no_such_function"):
        lesson_function(NOTEBOOKS / "11_moe_dispatch_combine.ipynb", "no_such_function", {})


def test_lesson_11_baseline_from_the_notebook_is_the_moe_layer():
    # 2 CPU ranks over gloo, top 2 of 4 experts: rows cross ranks both ways, with uneven split sizes
    results = run_ranks(2, "tests.rank_cases_lesson_steps:lesson11_baseline", 6, 16, 2, 2)
    assert all(r["error"] < 1e-5 for r in results), results
    assert all(r["rows_sent"] > 0 for r in results), results


def test_steps_table_judges_the_final_kernel_against_the_baseline():
    rows = {"torch + NCCL": (100.0, True), "first": (150.0, False), "final": (109.0, True)}
    lines = steps_table("99", rows, "torch + NCCL", "final")
    assert lines[2:5] == ["| torch + NCCL | 100.0 | 1.00 | CUDA graph |", "| first | 150.0 | 1.50 | eager loop |",
                          "| final | 109.0 | 1.09 | CUDA graph |"]
    assert "**met** (1.09x)" in lines[-1]
    assert "**missed** (1.50x)" in steps_table("99", rows, "torch + NCCL", "first")[-1]


def test_all_reduce_table_names_the_best_peer_and_what_auto_ran():
    KiB = 1 << 10
    rows = {"bf16": {
        8 * KiB: {"NCCL": (10.0, True), "torch one_shot": (6.0, True), "auto": (4.0, True), "one_shot": (4.0, True),
                  allreduce.AUTO_RAN: "one_shot"},
        512 * KiB: {"NCCL": (12.5, True), "torch two_shot": (12.0, True), "auto": (13.0, True),
                    "two_shot": (12.8, True), allreduce.AUTO_RAN: "two_shot"},
    }}
    lines = allreduce.table(rows, 2, gather=False)
    assert lines[2] == "| size | NCCL | torch one_shot | auto | one_shot | torch two_shot | two_shot | best peer | " \
                       "auto ran |"
    assert lines[4].endswith("| – | – | 1.50x (torch one_shot) | one_shot |")
    assert lines[5].endswith("| 0.92x (torch two_shot) | two_shot |")
    goals = allreduce.peer_goals(rows)
    assert goals[0].startswith("- bf16, at least 1.3x the best peer up to 256 KiB: **met** (worst: 1.50x at 8 KiB")
    assert goals[1].startswith("- bf16, at most 6 µs at 8 KiB: **met** (worst: 4.0 µs at 8 KiB")
    assert "never slower than the best peer up to 256 MiB: **missed** (worst: 0.92x at 512 KiB; the best peer " \
           "there: torch two_shot, 12.0 µs)" in goals[2]
    # NCCL's goals look past the peers: the fastest variant named where one is missed is one of ours
    assert "fastest variant there: two_shot" in allreduce.goal_line("bf16", rows["bf16"], allreduce.GOALS[1])
