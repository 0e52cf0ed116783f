"""Upstream Iris's public surface on the CPU backend: every name added so that upstream programs run unchanged.

Module-path aliases (``iris.host.*``, ``iris.mem.*``, ``iris.device.utils``) are our modules; ``iris.hip``'s
answers; ``iris.do_bench``; ``iris.ccl.Config``'s AMD tuning fields; AMD-only launch options dropped with one
warning each per process; the device clock in a kernel; ``device="cuda"`` on a CPU heap; how Gluon layouts
for 64-wide warps are re-expressed (their sm_90 compile is checked with the others in tests/test_gluon_sm90.py).
tests/gpu/test_upstream_cuda.py checks the clock, ``do_bench`` and the launch options on a GPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
import time
import types
import warnings

import pytest
import torch
import triton
import triton.language as tl
from iris.tensor_creation import CudaOnCpuHeapNote

import iris
from iris import upstream as upstream_layout
from iris.base import launch_options, warning_site
from iris.base.launch_options import AMDOnlyOptionWarning, amd_only_options, drop_amd_only
from iris.language.warp_width import halved_threads_per_warp
from iris.upstream.device_utils import get_cu_id, get_xcc_id, read_realtime

from .multirank import ROOT, run_ranks

OPS_CASES = "tests.rank_cases_upstream_ops"


def _python(code: str, tmp_path, env: dict | None = None) -> dict:
    """Run ``code`` (a script that prints JSON last) in a fresh interpreter of this venv; its JSON."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


# -- module-path aliases -------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(upstream_layout.UPSTREAM_MODULES))
def test_every_upstream_path_is_our_module(path):
    """Each upstream module path imports, and is (not copies) the module of ours it names."""
    ours = importlib.import_module(upstream_layout.UPSTREAM_MODULES[path])
    assert importlib.import_module(path) is ours and sys.modules[path] is ours
    parent, _, name = path.rpartition(".")
    assert getattr(importlib.import_module(parent), name) is ours


@pytest.mark.parametrize("path", sorted(upstream_layout.IMPORT_ONLY))
def test_import_only_paths_import_without_shadowing_the_parents_names(path):
    """Upstream's per-op modules and old iris.device.triton/gluon folders import as our modules, and the parent's
    name stays what it was: iris.ops.matmul_reduce_scatter the function, iris.device.triton Triton."""
    ours = importlib.import_module(upstream_layout.IMPORT_ONLY[path])
    assert importlib.import_module(path) is ours and sys.modules[path] is ours
    parent, _, name = path.rpartition(".")
    if parent in ("iris.ops", "iris.device"):  # our modules keep their own names
        assert getattr(importlib.import_module(parent), name, None) is not ours
    else:  # upstream's folder (iris.device.triton is iris.mem.triton's namespace) holds the alias
        assert getattr(importlib.import_module(parent), name) is ours
    assert iris.device.triton is triton and callable(iris.ops.matmul_reduce_scatter)


def test_upstream_device_context_paths_in_a_fresh_process(tmp_path):
    """upstream's tests/unittests/test_device_context.py: DeviceContext by its three paths is one class; importing
    iris.device.triton.context first (then the whole package by attribute) leaves iris.device's Triton alone."""
    result = _python("""
        import json
        from iris.device.triton.context import DeviceContext as by_old_path
        import iris.device.triton.context
        from iris import DeviceContext
        from iris.mem.triton.context import Context
        import triton
        print(json.dumps({"same": by_old_path is DeviceContext is Context,
                          "triton": iris.device.triton is triton and iris.device.tl is triton.language}))
    """, tmp_path)
    assert result == {"same": True, "triton": True}


def test_upstream_op_module_paths_and_allgather_multidim_on_two_ranks():
    """upstream's tests/ops and tests/examples imports: the reduce-scatter and all-gather preambles through the
    per-op module paths prepare the workspace the op then uses (results against torch); upstream's full (M, N) C
    gets the sum on this rank's tiles and nothing elsewhere; all_gather_matmul_hbm_buffer takes _auto_config's answer;
    distributed_allgather_multidim gives every rank's table, row r rank r's, and every rank refuses arrays of
    different shapes."""
    for result in run_ranks(2, f"{OPS_CASES}:upstream_op_modules", 8, 6, 4):
        rank = result["rank"]
        assert result["zeroed"] and result["prepared"] and result["same_workspace"], result
        assert result["gather_prepared"] and result["gather_same_workspace"], result
        assert result["scatter_error"] < 1e-4 and result["gather_error"] < 1e-4, result
        assert result["auto_config_error"] < 1e-4, result
        # 8 x 4 in 3 x 3 tiles: 3 x 2 of them, 3 per rank
        assert result["full_tiles"] == [[0, 3], [3, 6]][rank] and result["full_path"] == "tiles", result
        assert result["full_error"] < 1e-4 and result["full_rest_untouched"], result
        assert result["tables"] == [[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]]
        assert result["tables_dtype"] == "int32"
        assert result["uneven"].startswith(f"ValueError: rank {rank}: distributed_allgather_multidim: this rank's "
                                           f"array is ({4 - rank},) int64 but rank {1 - rank}'s is ({3 + rank},)")


def test_ring_all_reduce_never_runs_with_flags_too_small():
    """upstream's test_all_reduce_ring_flags_too_small expects a refusal where its workspace matched on shape alone;
    ours is keyed by what sizes its flags: other tile sizes reuse it, fewer programs get a new one that fits."""
    for result in run_ranks(2, f"{OPS_CASES}:ring_workspace_of_other_sizes"):
        assert result["tiles_reused"] and result["tiles_error"] < 1e-4, result
        assert result["few_programs"] == 1 and result["replaced"] and result["more_programs"] == 2, result
        assert result["flags"] == [3, 2, 2] and result["programs_error"] < 1e-4, result  # 2*world-1 slots


def test_zeros_is_zero_on_every_rank_before_any_rank_returns():
    """upstream's tests/examples/test_message_passing hung on 2 CPU ranks: the producer set a flag in the
    consumer's new ctx.zeros array before the consumer had zeroed its copy (reused memory), and the zeroing
    erased it. Now a peer reading or writing right after its own call sees a zeroed copy and keeps its write."""
    for result in run_ranks(2, f"{OPS_CASES}:zeros_ready_for_peers", 3, 1 << 23):
        for seen in result["rounds"]:
            assert seen["reused"] and seen["rest_zero"], seen
            assert seen["peer_was_zero"] is not False and seen["write_kept"] is not False, seen


def test_auto_config_of_the_staged_all_gather_matmul_answers_alike_for_every_shape():
    """Upstream's tests/ops import _auto_config and _CHAMPION_CONFIGS; none of the fetcher's knobs has an effect
    here, so it answers alike for every shape (the 2-rank test above passes its answer to the op)."""
    from iris.ops.all_gather_matmul_hbm_buffer import _CHAMPION_CONFIGS, _auto_config

    assert _CHAMPION_CONFIGS == {}
    for shape in ((1024, 256, 1024, 8), (256, 256, 512, 2)):
        assert _auto_config(*shape) == (iris.ops.FusedConfig(), 1, 1, 1, 1)
    with pytest.raises(ValueError, match="_auto_config's K must be an int >= 1, got 0"):
        _auto_config(8, 8, 0)


def test_upstream_tests_runner_summarises_a_folder_per_outcome(tmp_path):
    """tests/gpu/run_upstream_tests.py on 2 CPU ranks over a folder of pytest files written here (a pass, a
    failure, a skip, a fixture error, a test that fails on rank 1 only, a test that makes a CUDA graph, skipped
    where there is no GPU, a module that cannot be imported): the Markdown summary counts each outcome, and lists
    what did not pass with its first error line."""
    folder = tmp_path / "tests" / "unit"
    folder.mkdir(parents=True)
    (folder / "test_cases.py").write_text(textwrap.dedent("""
        import pytest
        import torch.distributed as dist
        import iris

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_passes():
            assert iris.iris(1 << 20).get_num_ranks() == dist.get_world_size() == 2

        def test_fails():
            assert 1 == 2, "one is not two"

        def test_skips():
            pytest.skip("not here")

        def test_errors(broken):
            pass

        def test_fails_on_rank_one():
            assert dist.get_rank() == 0, "rank one differs"

        def test_captures_a_cuda_graph():
            import torch
            torch.cuda.CUDAGraph()  # no GPU: the runner skips the test here
            pytest.skip("a GPU made the graph")
    """))
    (folder / "test_unimportable.py").write_text("from iris.no_such_module import anything\n")
    summary = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu" / "run_upstream_tests.py"), str(tmp_path),
                           "tests/unit", "--ranks", "2", "--timeout", "300", "--markdown", str(summary)],
                          cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    lines = summary.read_text().splitlines()
    assert lines[2] == "| `tests/unit` | 1 | 2 | 2 | 1 | 1 | " + lines[2].split(" | ")[6] + " | exit status 1 |"
    text = summary.read_text()
    assert "- `tests.unit.test_cases::test_fails`: failed: AssertionError: one is not two" in text
    assert "- `tests.unit.test_cases::test_fails_on_rank_one`: failed: rank 1: AssertionError: rank one differs" in text
    assert "- `tests.unit.test_cases::test_errors`: errors: RuntimeError: fixture broke" in text
    assert "- `tests.unit.test_unimportable`: not collected: ModuleNotFoundError: No module named " in text


def test_upstream_names_are_our_objects():
    """Names imported through upstream's paths, and iris.Context / iris.gluon.Context, are our objects."""
    from iris.device.utils import read_realtime as upstream_clock
    from iris.host.iris import iris as upstream_iris
    from iris.host.memory.symmetric_heap import SymmetricHeap
    from iris.host.platform.hip import get_wall_clock_rate
    from iris.host.platform.utils import do_bench
    from iris.host.tracing.events import TraceEvent
    from iris.mem.gluon.context import Context as GluonContext
    from iris.mem.triton.context import Context as TritonContext
    from iris.mem.triton.ops import atomic_add

    assert TraceEvent is iris.TraceEvent and upstream_iris is iris.iris and do_bench is iris.do_bench
    assert get_wall_clock_rate is iris.hip.get_wall_clock_rate and upstream_clock is read_realtime
    assert SymmetricHeap is iris.heap.SymmetricHeap and atomic_add is iris.atomic_add
    assert TritonContext is iris.Context is iris.DeviceContext is iris.TritonContext
    assert GluonContext is iris.gluon.Context is iris.gluon.IrisDeviceCtx
    assert {"Context", "do_bench", "hip", "experimental", "get_device_id_for_rank", "bench"} <= set(iris.__all__)


def test_iris_bench_has_upstreams_names():
    """Upstream's benchmark programs use iris.bench by these names (its __all__ at abd3f2ad); tests/test_bench.py
    checks what they do."""
    upstream_names = {"AxisDef", "BenchmarkDef", "Result", "State", "axis", "linear_range", "main", "power_of_two",
                      "register"}
    assert upstream_names <= set(iris.bench.__all__) and all(hasattr(iris.bench, name) for name in upstream_names)
    state_methods = ("__getitem__", "get", "set_bytes", "set_flops", "add_counter", "set_warmup", "set_repeat", "exec",
                     "skip")
    assert all(callable(getattr(iris.bench.State, name, None)) for name in state_methods)


def test_upstream_documented_classes_are_ours():
    """Upstream's API reference documents ctx.ccl and ctx.ops by the class names Iris.CCL and ops.OpsNamespace."""
    import iris.host.iris
    from iris.host.platform.utils import get_device_id_for_rank, is_simulation_env

    from iris.ccl.namespace import CCL
    from iris.ops.namespace import Ops

    assert iris.host.iris.Iris.CCL is iris.Iris.CCL is CCL and iris.ops.OpsNamespace is Ops
    assert all(hasattr(CCL, name) for name in ("all_reduce", "all_reduce_preamble", "all_gather", "all_to_all",
                                                "reduce_scatter"))
    assert all(hasattr(Ops, name) for name in ("matmul_all_reduce", "all_gather_matmul", "matmul_all_gather",
                                                "matmul_reduce_scatter"))
    assert get_device_id_for_rank is iris.get_device_id_for_rank is iris.hip.get_device_id_for_rank
    assert is_simulation_env is iris.hip.is_simulation_env


def test_upstream_folders_are_empty_namespaces_and_install_is_idempotent():
    """iris.host and the like hold only aliases; a path upstream lacks is not found; install() twice is once."""
    import iris.host
    import iris.mem.triton

    for folder in (iris.host, iris.host.platform, iris.mem, iris.mem.triton):
        assert isinstance(folder, types.ModuleType) and folder.__path__ == []
    assert iris.device.utils is iris.upstream.device_utils
    with pytest.raises(ModuleNotFoundError, match="iris.host.no_such_module"):
        importlib.import_module("iris.host.no_such_module")
    before = {path: sys.modules[path] for path in upstream_layout.UPSTREAM_MODULES}
    namespaces = sys.modules["iris.host"], sys.modules["iris.mem"]
    upstream_layout.install()
    assert {path: sys.modules[path] for path in upstream_layout.UPSTREAM_MODULES} == before
    assert (sys.modules["iris.host"], sys.modules["iris.mem"]) == namespaces


def test_upstream_paths_import_first_in_a_fresh_process(tmp_path):
    """`from iris.host.tracing.events import TraceEvent` as a program's first import gives our class."""
    result = _python("""
        import json
        from iris.host.tracing.events import TraceEvent
        from iris.device.utils import read_realtime
        import iris
        import iris.host.iris
        print(json.dumps({"event": TraceEvent is iris.TraceEvent, "context": iris.host.iris is iris.runtime.context,
                          "clock": read_realtime is iris.upstream.device_utils.read_realtime}))
    """, tmp_path)
    assert result == {"event": True, "context": True, "clock": True}


# -- iris.hip ------------------------------------------------------------------------------------

def test_hip_answers_for_the_cpu_backend():
    """Every iris.hip query's CPU answer (one chiplet, a nanosecond clock, the CPU's cores, no CUDA device)."""
    hip = iris.hip
    assert hip.get_num_xcc() == hip.get_num_xcc(0) == hip.get_num_xcc(5) == 1  # any rank's index is accepted
    assert hip.get_wall_clock_rate(0) == hip.get_wall_clock_rate(3) == hip.get_wall_clock_rate() == 1_000_000
    assert hip.get_cu_count() == hip.get_cu_count(0) == (os.cpu_count() or 1)
    assert hip.count_devices() == 0 and hip.get_device_id() == 0
    assert hip.get_arch_string() == hip.get_arch_string(0) == "cpu"
    assert hip.get_rocm_version() == (-1, -1)
    assert hip.set_device(0) is None
    assert hip.get_device_id_for_rank(0) == hip.get_device_id_for_rank(7) == 0  # the one CPU "device"


def test_is_simulation_env_reads_upstreams_variable(monkeypatch):
    """IRIS_SIMULATION=1/true/yes as upstream reads it; ranks share GPUs here either way."""
    for value, expected in (("1", True), ("Yes", True), ("true", True), ("0", False), ("", False)):
        monkeypatch.setenv("IRIS_SIMULATION", value)
        assert iris.hip.is_simulation_env() is expected
    monkeypatch.delenv("IRIS_SIMULATION")
    assert iris.hip.is_simulation_env() is False


@pytest.mark.parametrize("query", ["get_num_xcc", "get_wall_clock_rate", "get_cu_count", "get_arch_string"])
@pytest.mark.parametrize("bad", [-1, "0", 1.5])
def test_hip_refuses_a_bad_device_id(query, bad):
    """A device index that is not an int >= 0 is a ValueError, on the CPU backend too."""
    with pytest.raises(ValueError, match="device_id="):
        getattr(iris.hip, query)(bad)


# -- iris.do_bench -------------------------------------------------------------------------------

def test_do_bench_calls_barrier_preamble_and_fn_as_upstream():
    """One untimed first call, n_warmup, n_repeat; barrier around each call's preparation and once at the end."""
    calls = {"fn": 0, "barrier": 0, "preamble": 0}

    def count(name):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    times = iris.do_bench(count("fn"), barrier_fn=count("barrier"), preamble_fn=count("preamble"), n_warmup=3,
                          n_repeat=4, return_mode="all")
    assert isinstance(times, list) and len(times) == 4 and all(t >= 0 for t in times)
    assert calls == {"fn": 1 + 3 + 4, "preamble": 1 + 3 + 4, "barrier": 2 + 2 * (3 + 4) + 1}


def test_do_bench_return_modes_and_quantiles():
    """Each return mode's statistic is a float of milliseconds; quantiles give one number or a list."""
    for mode in ("mean", "median", "min", "max"):
        ms = iris.do_bench(lambda: time.sleep(0.002), n_warmup=0, n_repeat=2, return_mode=mode)
        assert isinstance(ms, float) and 2 <= ms < 200, (mode, ms)
    low, high = iris.do_bench(lambda: None, n_warmup=0, n_repeat=5, quantiles=[0.0, 1.0])
    assert 0 <= low <= high
    assert isinstance(iris.do_bench(lambda: None, n_warmup=0, n_repeat=3, quantiles=[0.5]), float)
    from iris.runtime.timing import _quantiles  # linear interpolation, as torch.quantile

    assert _quantiles([4.0, 1.0, 3.0, 2.0], [0.0, 0.5, 1.0, 0.25]) == [1.0, 2.5, 4.0, 1.75]
    assert _quantiles([7.0], [0.9]) == 7.0


@pytest.mark.parametrize("kwargs, message", [
    ({"return_mode": "avg"}, "return_mode='avg'"),
    ({"n_repeat": 0}, "n_repeat=0"),
    ({"n_warmup": -1}, "n_warmup=-1"),
    ({"quantiles": [0.5, 1.5]}, "quantiles="),
])
def test_do_bench_refuses_bad_arguments_before_timing(kwargs, message):
    """Bad arguments are a ValueError, raised before fn is called."""
    called = []
    with pytest.raises(ValueError, match=message):
        iris.do_bench(lambda: called.append(1), **{"n_warmup": 0, "n_repeat": 1, **kwargs})
    assert called == []


# -- iris.ccl.Config -----------------------------------------------------------------------------

def test_config_accepts_and_checks_upstreams_amd_tuning_fields():
    """num_stages, threads_per_warp, waves_per_eu: accepted with upstream's defaults, checked, no effect."""
    default = iris.ccl.Config()
    assert (default.num_stages, default.threads_per_warp, default.waves_per_eu) == (1, 64, 0)
    tuned = iris.ccl.Config(num_stages=3, threads_per_warp=32, waves_per_eu=2)
    assert (tuned.num_stages, tuned.threads_per_warp, tuned.waves_per_eu) == (3, 32, 2)
    for bad, message in (({"num_stages": 0}, "num_stages=0"), ({"waves_per_eu": -1}, "waves_per_eu=-1"),
                         ({"threads_per_warp": 48}, "threads_per_warp=48")):
        with pytest.raises(ValueError, match=message):
            iris.ccl.Config(**bad)


# -- iris.ops as upstream's benchmark programs use it (benchmark/ops/*.py at abd3f2ad) ---------------

# Upstream's FusedConfig fields and defaults (iris/ops/config.py at abd3f2ad), then ours.
UPSTREAM_FUSED_CONFIG = {"block_size_m": 256, "block_size_n": 64, "block_size_k": 64, "group_size_m": 1,
                         "num_sms": None, "num_xcds": 1, "chunk_size": 1, "cache_modifier_a": ".ca",
                         "cache_modifier_b": ".ca", "allow_tf32": True, "all_reduce_variant": "two_shot",
                         "all_reduce_num_rings": 1}


def test_fused_config_has_upstreams_fields_and_defaults():
    """Every field of upstream's FusedConfig, with its default, and ours after them; all_reduce_variant defaults to
    None (chosen by size) here, upstream's "two_shot" is one of the values it takes."""
    fields = [f.name for f in dataclasses.fields(iris.ops.FusedConfig)]
    assert fields == [*UPSTREAM_FUSED_CONFIG, "chunks", "growth", "variant"]
    default = iris.ops.FusedConfig()
    assert {name: getattr(default, name) for name in UPSTREAM_FUSED_CONFIG} == {**UPSTREAM_FUSED_CONFIG,
                                                                                "all_reduce_variant": None}
    stages = iris.ops.FusedConfig(block_size_m=32, block_size_n=64, block_size_k=64, group_size_m=4, num_xcds=8,
                                  all_reduce_variant="one_shot")  # bench_matmul_all_reduce_stages.py's
    stages.validate(world_size=2)
    assert stages.all_reduce_variant == "one_shot" and stages.variant == "auto"


@pytest.mark.parametrize("fields, error, message", [
    ({"all_reduce_variant": "tree"}, ValueError, "all_reduce_variant 'tree': use one of 'one_shot'"),
    ({"block_size_m": 0}, ValueError, "block_size_m must be an int >= 1, got 0"),
    ({"num_xcds": True}, ValueError, "num_xcds must be an int >= 1, got True"),
    ({"num_sms": -4}, ValueError, "num_sms must be an int >= 1 or None, got -4"),
])
def test_fused_config_refuses_what_no_path_takes(fields, error, message):
    with pytest.raises(error, match=message):
        iris.ops.FusedConfig(**fields)


def test_ops_have_upstreams_preambles_and_hbm_buffer_module():
    """Upstream's names in iris.ops, with its parameters; iris.ops.all_gather_matmul_hbm_buffer is the function
    (as upstream's __init__ makes it) and its module imports by path."""
    from iris.ops import all_gather_matmul_hbm_buffer as function
    from iris.ops.all_gather_matmul_hbm_buffer import (
        all_gather_matmul_hbm_buffer,
        all_gather_matmul_hbm_buffer_preamble,
    )

    module = sys.modules["iris.ops.all_gather_matmul_hbm_buffer"]
    assert function is all_gather_matmul_hbm_buffer and module.all_gather_matmul_hbm_buffer is function
    assert all_gather_matmul_hbm_buffer_preamble is iris.ops.all_gather_matmul_hbm_buffer_preamble
    assert {"matmul_all_reduce_preamble", "all_gather_matmul_preamble", "all_gather_matmul_hbm_buffer",
            "all_gather_matmul_hbm_buffer_preamble"} <= set(iris.ops.__all__)

    def parameters(function):
        return list(inspect.signature(function).parameters)
    assert parameters(iris.ops.matmul_all_reduce_preamble) == ["ctx", "C", "A", "B", "config", "workspace"]
    assert parameters(iris.ops.all_gather_matmul_preamble) == ["ctx", "A_sharded", "B", "config", "workspace"]
    assert parameters(all_gather_matmul_hbm_buffer_preamble) == ["ctx", "A_sharded", "B", "config", "k_per_flag",
                                                                 "staged_a_layout"]
    assert parameters(all_gather_matmul_hbm_buffer) == [
        "ctx", "output_tensor", "A_sharded", "B", "bias", "async_op", "config", "workspace", "num_fetch_sms",
        "k_per_flag", "fetch_block_m", "fetch_block_k", "staged_a_layout", "num_warps", "num_stages",
        "num_fetch_stages", "first_stage_fetch_sms", "trace"]


def test_matmul_all_reduce_preamble_and_each_all_reduce_variant_as_upstreams_benchmark():
    """bench_matmul_all_reduce(_stages).py's loop on 2 ranks: each named variant runs iris.ccl's algorithm of that
    name on the sequential path (None: chosen by size); the preamble zeroes C; nothing to reset between calls."""
    for result in run_ranks(2, f"{OPS_CASES}:matmul_all_reduce_variants", 40, 24, 16):
        report = result["report"]
        for variant, seen in report.items():
            assert seen["error"] < 1e-4, (variant, seen)
            assert seen["zeroed"] and seen["prepared"] and seen["same_workspace"], (variant, seen)
            assert seen["path"] == "sequential" and seen["locks"] is None and seen["aux_buffer"] is None
        assert {variant: seen["collective"] for variant, seen in report.items() if variant != "None"} == {
            "atomic": "atomic", "two_shot": "two_shot", "one_shot": "one_shot", "ring": "ring"}


def test_all_gather_matmul_hbm_buffer_as_upstreams_benchmark():
    """bench_all_gather_matmul.py's loop on 2 ranks: the staging buffer holds the peers' shards in their columns and
    the flags are heap int32, made by the preamble; zeroing them between calls changes no result; the bias is
    per row; what the chunked path cannot honour is refused, saying why."""
    for result in run_ranks(2, f"{OPS_CASES}:hbm_buffer", 24, 8, 12):
        assert result["path"] == "chunked" and result["same_workspace"]
        assert result["made"] == {"locks": [True, True], "aux_buffer": [[24, 16], True]}
        assert all(error < 1e-4 for error in result["errors"].values()), result["errors"]
        messages = result["messages"]
        assert all(message is not None for message in messages.values()), messages
        rank = result["rank"]
        assert messages["trace"].startswith(f"NotImplementedError: rank {rank}: all_gather_matmul_hbm_buffer(trace"
                                            "=True) records upstream's fetcher")
        assert "bias must be [24] torch.float32 (upstream's: one value per row of the product)" in (
            messages["column_bias"])
        assert "staged_a_layout 'tiled'" in messages["layout"]
        assert "num_fetch_sms must be an int >= 1 or None, got 0" in messages["fetch_sms"]
        assert "not the sequential one" in messages["sequential"]
        assert "K = world x the shard's columns" in messages["k"]
        assert "the chunked path reduces with its own piece-by-piece copies" in messages["chunked_all_reduce"]


def test_heap_offset_as_upstreams_moe_benchmark_resets_it():
    """bench_moe.py reads ctx.heap.allocator.heap_offset, allocates, and sets it back between calls: here it is the
    end of the memory tensors still use, setting it back is quiet when they were dropped, and the memory they
    used comes back at the next allocation; set past tensors in use, it keeps them and warns, naming them."""
    for result in run_ranks(2, f"{OPS_CASES}:heap_offset"):
        assert result["is_heap"] and result["mark"] == result["kept_ends"] > 0
        assert result["grown"] > result["mark"] and result["dropped"] == result["mark"]
        assert result["quiet"] == [] and result["reused"]
        ((category, message),) = result["loud"]
        assert category == "RuntimeWarning"
        assert message.startswith(f"rank {result['rank']}: heap_offset set to 0, but tensors still use kept "
                                  "(float32[10] (40 bytes))")
        assert "upstream's bump allocator would hand their memory out again" in message
        assert all("heap_offset must be an int from 0 to the heap's" in m for m in result["messages"].values())


# -- AMD-only launch options ---------------------------------------------------------------------

LAUNCH_SCRIPT = """
    import json
    import warnings

    import torch

    import iris
    from iris.base.launch_options import AMDOnlyOptionWarning
    from tests.launch_option_kernels import packed, scale

    src = torch.arange(16, dtype=torch.float32)
    out = torch.zeros_like(src)
    kept = torch.zeros(4, dtype=torch.int32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            scale[(2,)](src, out, 3.0, BLOCK=8, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2)
        packed[(1,)](kept, kpack=7, BLOCK=4, waves_per_eu=1)  # kpack is the kernel's; waves_per_eu said already
    dropped = [w for w in caught if issubclass(w.category, AMDOnlyOptionWarning)]
    print(json.dumps({
        "interpreted": iris.interpret.is_active(),
        "scaled": torch.equal(out, src * 3), "kept": kept.tolist(),
        "warnings": [str(w.message) for w in dropped], "files": sorted({w.filename for w in dropped}),
    }))
"""


def test_amd_only_launch_options_are_dropped_once_each_per_process(tmp_path):
    """On the interpreter, waves_per_eu/matrix_instr_nonkdim/kpack are dropped with one warning each per process;
    a kernel parameter named kpack is the kernel's and gets its value."""
    result = _python(LAUNCH_SCRIPT, tmp_path)
    assert result["interpreted"] and result["scaled"]
    assert result["kept"] == [7, 7, 7, 7]
    names = [message.split("=")[0].removeprefix("launch option ") for message in result["warnings"]]
    assert names == ["kpack", "matrix_instr_nonkdim", "waves_per_eu"], result["warnings"]
    assert "kpack=2 only tunes AMD GPUs; dropped on this backend" in result["warnings"][0]
    assert result["files"] == [str(tmp_path / "script.py")]  # the warning points at the launch


def test_amd_only_options_come_from_triton_and_kernel_parameters_win(monkeypatch):
    """amd_only_options() is HIP's options less CUDA's; drop_amd_only keeps parameters and other kwargs."""
    options = amd_only_options()
    assert {"waves_per_eu", "matrix_instr_nonkdim", "kpack"} <= options
    assert not {"num_warps", "num_stages", "num_ctas"} & options
    assert options <= launch_options.KNOWN_AMD_ONLY_OPTIONS  # the fallback for one-backend builds is current
    monkeypatch.setattr(warning_site, "_said", set())  # as in a process that has not launched yet
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = drop_amd_only({"BLOCK": 64, "kpack": 2, "waves_per_eu": 1, "num_warps": 4}, ["x", "kpack", "BLOCK"])
        assert drop_amd_only({"waves_per_eu": 3}, ["x"]) == {}
    assert kept == {"BLOCK": 64, "kpack": 2, "num_warps": 4}
    assert [w.category for w in caught] == [AMDOnlyOptionWarning]
    assert str(caught[0].message).startswith("launch option waves_per_eu=1 only tunes AMD GPUs")


# -- device utilities in a kernel ----------------------------------------------------------------

@triton.jit
def stamp(out, chiplet, unit):
    pid = tl.program_id(0)
    now = read_realtime()
    tl.static_assert(now.dtype == tl.int64)
    tl.store(out + pid, now)
    tl.store(chiplet + pid, get_xcc_id())
    tl.store(unit + pid, get_cu_id())


def test_read_realtime_is_the_hosts_monotonic_clock_on_the_interpreter():
    """read_realtime() gives int64 nanoseconds of time.monotonic_ns, in launch order; XCC and CU ids are 0."""
    out = torch.zeros(8, dtype=torch.int64)
    chiplet, unit = torch.full((8,), -1, dtype=torch.int32), torch.full((8,), -1, dtype=torch.int32)
    before = time.monotonic_ns()
    stamp[(8,)](out, chiplet, unit)
    after = time.monotonic_ns()
    stamps = out.tolist()
    assert before <= stamps[0] and stamps[-1] <= after, (before, stamps, after)
    assert stamps == sorted(stamps) and stamps[-1] > stamps[0]  # the interpreter runs programs in order
    assert chiplet.tolist() == [0] * 8 and unit.tolist() == [0] * 8
    rate_khz = iris.hip.get_wall_clock_rate(0)
    assert (after - before) / rate_khz == pytest.approx((after - before) / 1e6)  # ns / kHz = ms


# -- device="cuda" on a CPU heap -----------------------------------------------------------------

@pytest.mark.usefixtures("no_heap_files_left_behind")
def test_cuda_device_on_a_cpu_heap_gives_the_heap_tensor_with_one_note(monkeypatch):
    """Upstream's device="cuda" on a CPU heap: the tensor is on the heap (CPU), with one CudaOnCpuHeapNote."""
    monkeypatch.setattr(warning_site, "_said", set())  # as in a process that has not said it
    ctx = iris.iris("1MiB", backend="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zeros = ctx.zeros(4, 8, dtype=torch.float32, device="cuda")
        ones = ctx.ones(16, device=torch.device("cuda", 0))
        like = ctx.zeros_like(zeros, device="cuda:0")
        full = ctx.full((3,), 2.0, device="cuda")
        plain = ctx.zeros(2, device="cpu")
    notes = [w for w in caught if issubclass(w.category, CudaOnCpuHeapNote)]
    assert len(notes) == 1 and "device='cuda'" in str(notes[0].message), [str(w.message) for w in caught]
    assert notes[0].filename == __file__  # points at the program's call, not inside iris
    for tensor in (zeros, ones, like, full, plain):
        assert tensor.device.type == "cpu" and ctx.is_symmetric(tensor)
    assert float(ones.sum()) == 16 and full.tolist() == [2.0] * 3
    with pytest.raises(RuntimeError, match="device mismatch"):
        ctx.zeros(2, device="meta")  # only a CUDA device is taken for the CPU heap's


# -- Gluon layouts for 64-wide warps -------------------------------------------------------------

@pytest.mark.parametrize("threads, order, warp, halved", [
    ([64], [0], 32, [32]),
    ([4, 16], [1, 0], 32, [4, 8]),
    ([16, 4], [0, 1], 32, [8, 4]),
    ([1, 64], [1, 0], 32, [1, 32]),
    ([64, 1], [1, 0], 32, [32, 1]),  # the fastest dimension's count (1) is odd: the next one is halved
    ([2, 2, 16], [2, 1, 0], 32, [2, 2, 8]),
    ([128], [0], 64, [64]),
    ([32], [0], 32, None),  # already fits
    ([16], [0], 32, None),  # fits no width: left to Triton (and iris.language.hints' advice)
    ([4, 8], [1, 0], 32, None),
])
def test_halved_threads_per_warp(threads, order, warp, halved):
    """Threads per warp re-expressed for a warp half as wide, or None when not written for one twice as wide."""
    assert halved_threads_per_warp(threads, order, warp) == halved


def test_a_note_is_said_once_per_process_but_again_if_it_raised(monkeypatch):
    """warn_once: said once and pointing at the caller; under -W error it raises each time (never marked said)."""
    monkeypatch.setattr(warning_site, "_said", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            with pytest.raises(UserWarning, match="a note"):
                warning_site.warn_once("test note", "a note", UserWarning, "iris")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            warning_site.warn_once("test note", "a note", UserWarning, "iris")
    assert [(w.message.args[0], w.filename) for w in caught] == [("a note", __file__)]
