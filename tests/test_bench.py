"""iris.bench, upstream Iris's benchmark API: axes, flags, output formats, worker groups and their failures.

Programs are written to a temporary folder and run as users run them (``python prog.py --flags``): real worker
groups, one process per rank, on the CPU backend. Times are never asserted; only what they must agree with
(bandwidth = bytes / time, TFLOP/s = FLOPs / time).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
import torch

import iris.bench as bench
from iris.bench.axes import AxisDef, axis_points, effective_values, parse_axis_values
from iris.bench.cli import parse_command_line
from iris.bench.output import format_console, format_csv, format_json
from iris.bench.runner import RunPlan, group_sizes
from iris.bench.state import SkipCombination
from iris.heap.cpu import heap_files_of, process_alive
from tests.multirank import ROOT, run_ranks

PROGRAM = '''
import os
import torch
import iris.bench as bench

@bench.register
@bench.axis("num_ranks", [2])
@bench.axis("N", [256, 1024])
@bench.axis("dtype", [torch.float32, torch.float16])
def peer_copy(state, ctx):
    N, dtype = state["N"], state["dtype"]
    with open(os.path.join(os.environ["PIDS"], str(os.getpid())), "w"):
        pass  # the test checks that every rank process is gone afterwards
    if N == 1024 and dtype == torch.float16:
        state.skip("fp16 at 1024 left out")
    src = ctx.full((N,), float(ctx.get_rank()), dtype=dtype)
    dst = ctx.zeros(N, dtype=dtype)
    if os.environ.get("FAIL_AT") == str(N) and ctx.get_rank() == 1:
        raise ValueError("rank 1 refuses")
    peer = (ctx.get_rank() + 1) % ctx.get_num_ranks()
    state.set_bytes(N * src.element_size())
    state.set_flops(3 * N)
    state.add_counter("elements", float(N))
    state.set_repeat(4)
    state.exec(lambda: dst.copy_(ctx.as_remote(src, peer)), preamble_fn=dst.zero_)

@bench.register
def no_num_ranks_axis(state, ctx):
    state.exec(lambda: None)

if __name__ == "__main__":
    bench.main()
'''


@pytest.fixture
def program(tmp_path):
    """Run PROGRAM with flags: the finished process; every rank it started is checked to be gone."""
    script = tmp_path / "bench_peer_copy.py"
    script.write_text(PROGRAM)
    pids = tmp_path / "pids"
    pids.mkdir()

    def run(*flags, env=None, launcher=()):
        done = subprocess.run([sys.executable, *launcher, str(script), "--n_warmup=1", *flags], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "PIDS": str(pids), **(env or {})},
                              capture_output=True, text=True, timeout=120)
        ranks = [int(pid.name) for pid in pids.iterdir()]
        alive = [pid for pid in ranks if process_alive(pid)]
        assert not alive, f"rank processes {alive} outlived the run"
        # Only this run's ranks' files: the other test lane's ranks make (and unlink) theirs at the same time.
        left = heap_files_of(ranks)
        assert not left, f"heap files left in /dev/shm: {left}"
        done.pids = ranks
        return done

    return run


# -- axes, state, flags: no processes ---------------------------------------------------------------------

def test_ranges_and_axis_order():
    assert bench.power_of_two(8, 10) == [256, 512, 1024]
    assert bench.linear_range(64, 256, 64) == [64, 128, 192, 256]
    assert bench.linear_range(1, 6, 2) == [1, 3, 5]

    @bench.axis("M", [1, 2])
    @bench.axis("dtype", [torch.float16, torch.bfloat16])
    def gemm(state, ctx): ...

    definition = bench.BenchmarkDef.of(gemm)
    assert definition.axis_names() == ["M", "dtype"]  # written first, varies slowest
    points = [dict(p) for p in axis_points(definition.axes)]
    assert points == [{"M": 1, "dtype": torch.float16}, {"M": 1, "dtype": torch.bfloat16},
                      {"M": 2, "dtype": torch.float16}, {"M": 2, "dtype": torch.bfloat16}]


@pytest.mark.parametrize(("text", "axis_name", "values"), [
    ("1024,2048", "M", [1024, 2048]),
    ("pow2:3:5", "M", [8, 16, 32]),
    ("lin:64:256:64", "N", [64, 128, 192, 256]),
    ("fp16,bf16,fp32", "dtype", [torch.float16, torch.bfloat16, torch.float32]),
    ("float16", "precision", [torch.float16]),
    ("0.5,1", "alpha", [0.5, 1.0]),
    ("ring,two_shot", "variant", ["ring", "two_shot"]),
])
def test_axis_values_from_the_command_line(text, axis_name, values):
    assert parse_axis_values(text, axis_name) == values


@pytest.mark.parametrize(("text", "axis_name", "message"), [
    ("pow2:3", "M", "pow2:START:END"),
    ("lin:a:b:c", "M", "lin:START:END:STEP"),
    ("fp16,fp8", "dtype", "unknown dtype fp8"),
    ("1,,2", "M", "empty value"),
])
def test_bad_axis_values_say_the_form(text, axis_name, message):
    with pytest.raises(ValueError, match=message):
        parse_axis_values(text, axis_name)


def test_overrides_skips_and_rank_counts():
    sweep = AxisDef("M", [1, 2, 4])
    assert effective_values(sweep, {"M": [8, 16]}, {}) == [8, 16]
    assert effective_values(sweep, {}, {"M": [2]}) == [1, 4]

    @bench.axis("num_ranks", [2, 4, 8])
    def collective(state, ctx): ...

    def single(state, ctx): ...

    both = [bench.BenchmarkDef.of(collective), bench.BenchmarkDef.of(single)]
    assert group_sizes(both, RunPlan()) == [2, 4, 8]  # single has no num_ranks axis: upstream's 8
    assert group_sizes(both, RunPlan(skip_overrides={"num_ranks": [4, 8]})) == [2, 8]
    assert group_sizes(both, RunPlan(axis_overrides={"num_ranks": [2]})) == [2]  # for every benchmark
    assert group_sizes(both, RunPlan(benchmark_filter="^coll")) == [2, 4, 8]
    assert group_sizes(both, RunPlan(benchmark_filter="nothing")) == []
    assert group_sizes([both[0]], RunPlan(skip_overrides={"num_ranks": [2, 4, 8]})) == []  # all skipped: none


def test_state_records_what_the_benchmark_declares():
    state = bench.State({"M": 64}, n_warmup=25, n_repeat=100)
    assert state["M"] == 64 and state.get("N") is None and state.get("N", 8) == 8
    with pytest.raises(KeyError, match="no axis 'N'; its axes are \\['M'\\]"):
        state["N"]
    state.set_bytes(1 << 20)
    state.set_flops(1 << 30)
    state.add_counter("tiles", 4.0)
    state.set_warmup(3)
    state.set_repeat(7)
    preamble = []
    state.exec(lambda: None, preamble_fn=lambda: preamble.append(1))
    assert (state._bytes, state._flops, state._counters) == (1 << 20, 1 << 30, {"tiles": 4.0})
    assert (state._n_warmup, state._n_repeat) == (3, 7)
    state._preamble_fn()
    assert preamble == [1]
    with pytest.raises(SkipCombination) as skipped:
        state.skip("M too small")
    assert skipped.value.reason == "M too small"


def test_formats_write_the_same_points():
    results = [
        bench.Result("gemm", {"M": 8, "dtype": torch.float16}, 2.0, [1.0, 3.0], bandwidth_gbps=0.5, tflops=1.5,
                     counters={"tiles": 4.0}, world_size=2),
        bench.Result("gemm", {"M": 16, "dtype": torch.float16}, 0.0, [], skipped=True, skip_reason="too big",
                     world_size=2),
    ]
    records = json.loads(format_json(results))
    assert records[0] == {"benchmark": "gemm", "world_size": 2, "params": {"M": "8", "dtype": "float16"},
                          "gpu_time_ms": 2.0, "all_times_ms": [1.0, 3.0], "bandwidth_gbps": 0.5, "tflops": 1.5,
                          "counters": {"tiles": 4.0}}
    assert records[1]["skipped"] is True and records[1]["skip_reason"] == "too big"
    rows = list(csv.DictReader(io.StringIO(format_csv(results))))
    assert list(rows[0]) == ["benchmark", "world_size", "M", "dtype", "gpu_time_ms", "bandwidth_gbps", "tflops",
                             "tiles", "skipped", "skip_reason"]
    assert (rows[0]["gpu_time_ms"], rows[0]["tiles"], rows[1]["gpu_time_ms"]) == ("2.0000", "4.0000", "")
    console = format_console(results).splitlines()
    assert console[1] == "gemm"
    assert console[2].split() == ["M", "dtype", "GPU", "Time", "(ms)", "BW", "(GB/s)", "TFLOPS", "tiles"]
    assert console[3].split() == ["8", "float16", "2.000", "0.5", "1.5", "4.000"]
    assert console[4].split() == ["16", "(skipped)", "too", "big"]


# -- real worker groups on the CPU backend ----------------------------------------------------------------

def _check_rates(record):
    """Bandwidth and TFLOP/s are the declared bytes and FLOPs over the mean time, as upstream computes them."""
    seconds = record["gpu_time_ms"] * 1e-3
    n, size = int(record["params"]["N"]), {"float32": 4, "float16": 2}[record["params"]["dtype"]]
    assert record["bandwidth_gbps"] == pytest.approx(n * size / 1e9 / seconds)
    assert record["tflops"] == pytest.approx(3 * n / 1e12 / seconds)
    assert record["gpu_time_ms"] == pytest.approx(sum(record["all_times_ms"]) / len(record["all_times_ms"]))


def test_json_run_of_a_two_rank_group(program, tmp_path):
    out = tmp_path / "results.json"
    done = program("--benchmark_format=json", f"--benchmark_out={out}", "--benchmark_filter=peer")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "times are the Triton interpreter's" in done.stderr  # JSON stays parseable: the note is on stderr
    records = json.loads(done.stdout)
    assert json.loads(out.read_text()) == records
    points = [(r["params"]["N"], r["params"]["dtype"], r.get("skipped", False)) for r in records]
    assert points == [("256", "float32", False), ("256", "float16", False), ("1024", "float32", False),
                      ("1024", "float16", True)]
    for record in records[:3]:
        assert record["world_size"] == 2 and record["params"]["num_ranks"] == "2"
        assert len(record["all_times_ms"]) == 4  # the benchmark's set_repeat(4)
        assert record["counters"] == {"elements": float(record["params"]["N"])}
        _check_rates(record)
    assert records[3]["skip_reason"] == "fp16 at 1024 left out"


def test_csv_and_console_runs_with_axis_flags(program):
    done = program("--benchmark_format=csv", "--axis_N=pow2:6:7", "--skip_dtype=fp16", "--benchmark_filter=peer")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(row["N"], row["dtype"]) for row in rows] == [("64", "float32"), ("128", "float32")]
    for row in rows:
        assert float(row["bandwidth_gbps"]) == pytest.approx(int(row["N"]) * 4 / 1e9 / (float(row["gpu_time_ms"])
                                                                                        * 1e-3), rel=0.01, abs=0.01)
    # Both benchmarks at one rank count given for all; no_num_ranks_axis then runs there too, as upstream.
    done = program("--axis_num_ranks=2", "--axis_N=64", "--axis_dtype=fp32")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Note: CPU backend: times are the Triton interpreter's")
    header = lines[lines.index("peer_copy") + 1]
    assert header.split("  ")[0:1] == ["num_ranks"] and "GPU Time (ms)" in header and "BW (GB/s)" in header
    assert "TFLOPS" in header and header.rstrip().endswith("elements")
    assert lines[lines.index("no_num_ranks_axis") + 1].split() == ["num_ranks", "GPU", "Time", "(ms)"]


def test_a_benchmark_failing_on_rank_one_ends_the_group_and_says_where(program):
    done = program("--benchmark_filter=peer", env={"FAIL_AT": "1024"})
    assert done.returncode == 1
    message = done.stderr.strip().splitlines()[-1]
    assert message == ("iris.bench: the 2-rank worker group failed: benchmark 'peer_copy' failed on "
                       "rank 1 of 2 at num_ranks=2, N=1024, dtype=float32: ValueError: rank 1 refuses")


@pytest.mark.parametrize(("flags", "message"), [
    (["--axis_M=64"], "no benchmark of this program has the axis M; its axes are N, dtype, num_ranks"),
    (["--axis_N", "64"], "unrecognized argument '--axis_N': axes are set as --axis_<name>=VALUES"),
    (["--axis_dtype=fp8"], "unknown dtype fp8"),
    (["--axis_num_ranks=0,2"], "is not a list of rank counts"),
    (["--n_repeat=0"], "give at least 1"),
    (["--benchmark_format=xml"], "invalid choice: 'xml'"),
    (["--benchmark_filter=("], "is not a regular expression"),
])
def test_bad_flags_are_refused_before_any_rank_starts(flags, message, capsys):
    @bench.axis("N", [64])
    @bench.axis("dtype", [torch.float32])
    def copy(state, ctx): ...

    with pytest.raises(SystemExit) as refused:
        parse_command_line(flags, [bench.BenchmarkDef.of(copy)])
    assert refused.value.code == 2 and message in capsys.readouterr().err


def test_run_benchmarks_inside_existing_contexts():
    """The loop a workbench cluster runs: each rank's own times, benchmarks for other rank counts left out."""
    per_rank = run_ranks(2, "tests.rank_cases_bench:run_in_context")
    for rank, results in enumerate(per_rank):
        assert [(r["name"], r["params"]) for r in results] == [
            ("peer_copy", {"N": "64", "dtype": "torch.float32"}), ("peer_copy", {"N": "128", "dtype": "torch.float32"})]
        for r in results:
            assert len(r["times"]) == 3 and r["world_size"] == 2 and r["counters"] == {"peer": float(1 - rank)}
            assert r["gbps"] == pytest.approx(int(r["params"]["N"]) * 4 / 1e9 / (sum(r["times"]) / 3 * 1e-3))


# -- under an outside launcher (upstream's #534): the process is a rank already ----------------------------------

TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")


def test_main_under_torchrun_runs_in_the_launchers_ranks(program):
    done = program("--benchmark_format=json", "--axis_N=256", launcher=TORCHRUN)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.pids) == 2  # torchrun's two processes ran the benchmark: no worker group was started inside
    assert "launched as 2 ranks (WORLD_SIZE=2): num_ranks 8 not run" in done.stderr  # no_num_ranks_axis's default
    records = json.loads(done.stdout)  # rank 0 alone prints
    assert [(r["benchmark"], r["params"]["N"], r["params"]["dtype"]) for r in records] == [
        ("peer_copy", "256", "float32"), ("peer_copy", "256", "float16")]
    for record in records:
        assert record["world_size"] == 2 and len(record["all_times_ms"]) == 4
        _check_rates(record)


def test_a_failure_under_torchrun_ends_the_run_and_says_where(program):
    done = program("--benchmark_filter=peer", "--axis_N=1024", "--axis_dtype=fp32", env={"FAIL_AT": "1024"},
                   launcher=TORCHRUN)
    assert done.returncode != 0
    assert ("iris.bench: benchmark 'peer_copy' failed on rank 1 of 2 at num_ranks=2, N=1024, dtype=float32: "
            "ValueError: rank 1 refuses") in done.stderr


@pytest.mark.parametrize("rank", [0, 1])
def test_a_launchers_world_size_no_benchmark_runs_at_is_refused_naming_the_flag(program, rank):
    done = program("--benchmark_filter=peer", env={"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "3"})
    assert done.returncode == 1 and done.stdout == "" and done.pids == []  # refused before any benchmark ran
    if rank == 0:
        assert done.stderr.strip() == (
            "iris.bench: launched as 3 ranks (WORLD_SIZE=3), but the selected benchmarks run at num_ranks 2: pass "
            "--axis_num_ranks=3, or launch with a world size they run at")
    else:
        assert done.stderr == ""  # rank 0 says it, once
