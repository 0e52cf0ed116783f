"""iris.perf on the CPU: spec lookup from real device strings, roofline arithmetic, ``compare`` on two real ranks
(interpreter timing, labelled so) and the errors for bad input; and ``workbench.bench`` on real engines, whose
output carries a static form (the table and the roofline's PNG). The GPU path is in tests/gpu/test_perf_cuda.py.
"""

from __future__ import annotations

import pytest

from iris.base import gpu_specs as specs
from iris.perf import Roof, as_benchmark, roofline

from .multirank import run_ranks

CASES = "tests.rank_cases_perf"

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")

# torch.cuda.get_device_name() as those parts answer it, and the spec each should find.
DEVICE_NAMES = {
    "NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe", "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM", "NVIDIA H200 NVL": "H200 NVL", "NVIDIA GH200 480GB": "GH200",
    "NVIDIA A100-SXM4-80GB": "A100 SXM 80GB", "NVIDIA A100-SXM4-40GB": "A100 SXM 40GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB", "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB", "NVIDIA B200": "B200",
    "NVIDIA L40S": "L40S", "NVIDIA L4": "L4", "NVIDIA A10": "A10",
}


@pytest.mark.parametrize("device, part", DEVICE_NAMES.items())
def test_spec_found_from_device_name(device, part):
    spec = specs.find(device)
    assert spec.name == part
    # Dense figures: the tensor-core bf16 peak is at least the fp32 one, and fp16 matches bf16 on these parts.
    assert spec.peak("bf16") >= (spec.peak("fp32") or 0) and spec.peak("fp16") == spec.peak("bf16")
    assert spec.hbm_gbs > spec.peer_gbs > 0 and spec.sm_count > 0


def test_spec_figures_and_unknown_parts():
    h200, h100 = specs.find("NVIDIA H200"), specs.find("NVIDIA H100 80GB HBM3")
    assert (h200.peak("bfloat16"), h200.hbm_gbs, h200.peer_gbs) == (989.5, 4800.0, 450.0)  # dense, one direction
    assert h100.hbm_gbs == 3350.0 and h100.peak("fp8") == 1979.0
    assert specs.find("NVIDIA A100-SXM4-80GB").peak("fp8") is None  # Ampere has no fp8 units
    with pytest.warns(UserWarning, match="no spec sheet for GPU 'NVIDIA GeForce RTX 4090'"):
        assert specs.find("NVIDIA GeForce RTX 4090") is None


def test_roofline_arithmetic():
    roof = Roof("spec", peak_tflops=1000.0, bandwidth_gbs=4000.0)
    assert roof.ridge == 250.0  # flops per byte where the roofs meet
    assert roof.attainable(10.0) == 40.0 and roof.attainable(250.0) == 1000.0 and roof.attainable(1e6) == 1000.0
    assert roofline.intensity(2 * 1024 ** 3, 3 * 2 * 1024 ** 2) == pytest.approx(1024 / 3)
    assert roofline.intensity(10, 0) is None and roofline.intensity(None, 10) is None
    assert roofline.share_of_roof(20.0, roof, 10.0) == 0.5


def test_roofline_picture_leaves_out_candidates_without_flops():
    from iris.perf import CandidateResult, PerfReport
    from workbench.widgets.roofline_view import draw

    # A copy declares bytes and flops=0: intensity 0 has no place on log axes (it divided by zero before).
    copy = CandidateResult("copy", 10.0, (10.0, 9.0), "graph", tflops=0.0, gbs=100.0, intensity=0.0)
    mm = CandidateResult("mm", 20.0, (20.0, 19.0), "graph", tflops=500.0, gbs=100.0, intensity=300.0)
    report = PerfReport("cuda", "NVIDIA H200", 2, "bfloat16", (copy, mm), specs.find("NVIDIA H200"))
    assert draw(report).startswith(b"\x89PNG")


def test_bandwidth_picture_where_no_candidate_declares_flops():
    from iris.perf import CandidateResult, Ceilings, PerfReport
    from workbench.widgets.roofline_view import _bandwidth_ceilings, draw

    measured = Ceilings("bfloat16", 700.0, 4000.0, {(0, 1): 380.0, (1, 0): 370.0}, 1 << 28)
    gathers = (CandidateResult("mine", 100.0, (100.0, 99.0), "graph", gbs=2000.0, peer_gbs=330.0),
               CandidateResult("NCCL", 110.0, (110.0, 99.0), "graph", gbs=1900.0, peer_gbs=300.0))
    report = PerfReport("cuda", "NVIDIA H200", 2, "bfloat16", gathers, specs.find("NVIDIA H200"), measured)
    # Peer bytes declared: the link's ceilings (one direction; the slowest measured link).
    assert _bandwidth_ceilings(report) == ("peer link", "peer_gbs", {"H200 SXM spec": 450.0, "measured": 370.0})
    assert draw(report).startswith(b"\x89PNG")
    copies = tuple(CandidateResult(r.label, r.time_us, r.per_rank_us, r.mode, gbs=r.gbs) for r in gathers)
    copies_report = PerfReport("cuda", "NVIDIA H200", 2, "bfloat16", copies, None, measured)
    assert _bandwidth_ceilings(copies_report) == ("memory", "gbs", {"measured": 4000.0})
    on_cpu = PerfReport("cpu", "Triton interpreter", 2, "bfloat16", copies)
    assert _bandwidth_ceilings(on_cpu) is None and draw(on_cpu).startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def cpu_compare():
    return run_ranks(2, f"{CASES}:compare_on_cpu", timeout=240)


def test_compare_on_cpu_ranks(cpu_compare):
    results = cpu_compare
    for rank, result in enumerate(results):
        report = result["report"]
        assert report["backend"] == "cpu" and report["num_ranks"] == 2 and report["ceilings"] is None
        assert any("Triton interpreter" in note and "no hardware roofline" in note for note in report["notes"])
        rows = {row["label"]: row for row in report["results"]}
        assert list(rows) == ["torch add", "put kernel", "ccl all_reduce"]
        for row in rows.values():
            assert row["mode"] == "interpreter" and row["of_spec"] == {} and row["of_measured"] == {}
            assert row["time_us"] == max(row["per_rank_us"]) > 0 and len(row["per_rank_us"]) == 2
            assert row["gbs"] == pytest.approx(2 * 4 * 4096 / (row["time_us"] * 1e-6) / 1e9)
        assert rows["torch add"]["tflops"] == pytest.approx(4096 / (rows["torch add"]["time_us"] * 1e-6) / 1e12)
        assert rows["put kernel"]["peer_gbs"] > 0 and rows["ccl all_reduce"]["peer_gbs"] is None
        assert rows["torch add"]["intensity"] == pytest.approx(4096 / (8 * 4096))
        assert "interpreter" in result["text"] and "put kernel" in result["text"]
        # The candidates really ran: the put wrote the previous rank's value, the all_reduce summed.
        assert result["dst_first"] == float((rank - 1) % 2) and result["out_first"] == 2.0
    # Collective: both ranks report the same (slowest-rank) times.
    assert results[0]["report"]["results"] == results[1]["report"]["results"]


def test_compare_runs_as_an_iris_bench_benchmark(cpu_compare):
    import iris.bench

    fn = as_benchmark({"a": lambda: None, "b": lambda: None}, flops={"a": 10}, bytes=64, peer_bytes=8)
    state = iris.bench.State({"candidate": "a"}, n_warmup=0, n_repeat=1)
    fn(state, None)
    assert (state._flops, state._bytes, state._counters) == (10, 64, {"peer_bytes": 8})
    assert iris.bench.BenchmarkDef.of(fn).axes[0].values == ["a", "b"]
    # On two ranks, through iris.bench.run_benchmarks: the same rows, timed by upstream's protocol.
    for result in cpu_compare:
        report = result["as_benchmark"]
        assert [r["label"] for r in report["results"]] == ["torch add", "put kernel", "ccl all_reduce"]
        assert all(r["mode"] == "interpreter" and r["time_us"] == max(r["per_rank_us"]) for r in report["results"])
        assert report["results"][0]["tflops"] > 0 and any("iris.bench" in note for note in report["notes"])


@pytest.fixture(scope="module")
def refusals():
    return run_ranks(2, f"{CASES}:bad_input", timeout=240)


def test_failing_candidate_names_rank_and_label(refusals):
    for messages in refusals:
        message = messages["fails on rank 1"]
        assert "candidate 'divides' failed on rank 1" in message and "ZeroDivisionError" in message
        assert "rank 0:" not in message


def test_mismatched_flops_name_the_rank(refusals):
    for messages in refusals:
        assert "flops=200 on rank 1 but 100 on rank 0" in messages["flops differ"]
        # on GPUs only rank 0 would measure the ceilings (a collective): refused on every rank instead
        assert "measure_ceilings=False on rank 1 but True on rank 0" in messages["ceilings differ"]


def test_ceilings_out_of_memory_on_one_rank_said_on_every_rank(refusals):
    for rank, messages in enumerate(refusals):
        message = messages["out of memory on rank 1"]  # raised on rank 0 too: it did not wait for rank 1
        assert message.startswith(f"rank {rank}: could not allocate two 1 GiB buffers"), message
        assert "rank 1: OutOfMemoryError: CUDA out of memory" in message and "measure_ceilings=False" in message


def test_gpu_only_candidate_on_cpu(refusals):
    for messages in refusals:
        message = messages["needs a GPU"]
        assert "candidate 'torch + NCCL' failed on ranks 0, 1" in message
        assert "needs a GPU" in message and "CPU backend" in message


def test_not_callable(refusals):
    for messages in refusals:
        assert ("rank 0: candidate 'fine' is a str, not a callable; rank 1: candidate 'fine' is a str, not a "
                "callable") in messages["not callable"]



# -- the bench view, on real engines ------------------------------------------------------------------

@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    import workbench

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    ip.run_line_magic("iris", "start -n 2 --backend cpu --heap 16MiB --timeout 120")
    result = ip.run_cell("%%iris_kernel\nx = ctx.zeros(1024)\nadd_one = lambda: x.add_(1)\n"
                         "only_on_zero = (lambda: x.mul_(1.0)) if rank == 0 else None", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    yield ip
    workbench.current().stop()


@pytest.mark.slow
def test_bench_view_static_form_holds_table_and_picture(shell, monkeypatch):
    import workbench

    shown = []
    monkeypatch.setattr("workbench.magics.display", shown.append)
    result = shell.run_cell('%iris bench add=add_one "scale=lambda: x.mul_(1.0)" --bytes 2*4*1024',
                            store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    view = shown[-1]
    assert [r.label for r in view.report.results] == ["add", "scale"]
    assert all(r.mode == "interpreter" and r.gbs > 0 for r in view.report.results)
    bundle = view._repr_mimebundle_()
    static = bundle["text/html"]
    assert "<table class='iris-bench-table'" in static and "lambda: x.mul_(1.0)" in static
    assert '<img src="data:image/png;base64,' in static and "no hardware roofline" in static
    plain = bundle["text/plain"]  # the table too, where nothing can be drawn
    assert plain.startswith("BenchView of 2 candidates on 2 ranks (Triton interpreter)"), plain
    assert all(f"  {label} " in plain for label in ("add", "scale")) and "interpreter" in plain.splitlines()[-1], plain
    # The candidates ran on both ranks: x counted the adds.
    assert workbench.current().pull("bool((x > 0).all())") == [True, True]
    # The same, as an iris.bench benchmark inside the cluster.
    view = workbench.bench({"add": "add_one"}, bytes=8192, runner="iris.bench", n_warmup=0, n_repeat=2)
    assert view.report.results[0].gbs > 0 and "iris.bench" in view._repr_mimebundle_()["text/html"]


@pytest.mark.slow
def test_bench_names_the_rank_that_lacks_a_candidate(shell):
    import workbench
    from workbench import RankError

    with pytest.raises(RankError, match=r"rank 1: candidate 'half' is a NoneType, not a callable"):
        workbench.bench({"half": "only_on_zero"})
    with pytest.raises(TypeError, match="are not expressions"):
        workbench.bench({"f": lambda: None})


@pytest.mark.slow
def test_sweep_view_shows_what_ran_what_chose_it_and_the_peer(shell):
    import workbench
    from workbench import RankError

    view = workbench.sweep("all_reduce", sizes=[1024, 4096])
    report = view.report
    assert [p.nbytes for p in report.points] == [1024, 4096] and report.world == 2 and not report.meaningful
    # No table for the CPU, nothing tuned there: the size rules chose, and the view says so per size.
    assert all(p.source == "the size rules and defaults" and p.ran["variant"] == "one_shot" for p in report.points)
    assert all(set(p.peers_us) == {"gloo"} and p.us > 0 and p.peers_us["gloo"] > 0 for p in report.points)
    bundle = view._repr_mimebundle_()
    static = bundle["text/html"]
    assert "<table class='iris-sweep-table'" in static and '<img src="data:image/png;base64,' in static
    assert "the size rules and defaults" in static and "speed-up over gloo" in static
    plain = bundle["text/plain"]  # the table as text, where nothing can be drawn
    assert plain.startswith("all_reduce, bfloat16, 2 ranks (CPU interpreter)") and "mean nothing" in plain
    assert len(plain.splitlines()) == 2 + 2, plain  # headline, columns, one line per size
    for collective in ("all_gather", "reduce_scatter", "all_to_all"):
        points = workbench.sweep(collective, sizes=[2048], dtype="float32").report.points
        assert len(points) == 1 and points[0].us > 0 and points[0].peers_us["gloo"] > 0, collective
    with pytest.raises(RankError, match=r"rank \d: iris.perf.sweep: collective='all_sum': use one of"):
        workbench.sweep("all_sum")
