"""The autotuning interface of ``iris.ccl`` (upstream Iris's ``iris.ccl.AUTOTUNE``, ``Config.autotune()``,
``IRIS_AUTOTUNE``, ``IRIS_AUTOTUNE_BUDGET``, the disk cache) on CPU ranks: refusals where timings mean nothing, the
tuner at work when made to run anyway (rank 0's winner on every rank, cached, read back), the shipped table's rows
(nearest size, nearest world size named), and a cache of other versions not used silently.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from iris.ccl import Config, TuningWarning, tuning

from .multirank import run_ranks

CASES = "tests.rank_cases_tuning"


@pytest.mark.usefixtures("no_heap_files_left_behind")
def test_autotune_on_cpu_ranks(tmp_path):
    cache = tmp_path / "tuning.json"
    results = run_ranks(2, f"{CASES}:autotune_on_cpu_ranks", timeout=240,
                        env={"IRIS_AUTOTUNE_CACHE": str(cache), "IRIS_AUTOTUNE_BUDGET": "60"})
    for rank, result in enumerate(results):
        assert result["plain_ok"] and result["plain_said"] == [], (rank, result["plain_said"])
        assert result["refused_ok"] and not result["cache_after_refusal"]
        assert len(result["refused_said"]) == 1 and "CPU interpreter" in result["refused_said"][0]
        assert result["tuned_ok"] and result["again_ok"]
        assert any("IRIS_AUTOTUNE_ANYWAY" in said for said in result["anyway_said"])
    assert results[0]["tuned"] == results[1]["tuned"], "every rank runs rank 0's winner"
    (key, entry), = results[0]["cache"]["entries"].items()
    assert key == "all_reduce|512|float32|2|cpu|num_warps=4"
    assert "num_warps" not in entry  # the field the caller fixed is in the key, not tuned
    assert {"all_reduce_variant", "block_size", "comm_sms", "us"} <= set(entry)
    assert results[0]["tuned"]["variant"] == entry["all_reduce_variant"]
    assert results[0]["tuned"]["block"] == entry["block_size"] and results[0]["tuned"]["grid"] <= entry["comm_sms"]
    assert results[0]["again"] == results[0]["tuned"], "the cached choice is what the next call runs"
    assert set(results[0]["cache"]["versions"]) == {"torch", "triton"}


def write_table(folder, rows):
    folder.mkdir(exist_ok=True)
    (folder / "cpu.json").write_text(json.dumps({"gpu": "cpu", "rows": rows}))


ROW = {"collective": "all_reduce", "dtype": "float32", "variant": None, "all_reduce_variant": "two_shot",
       "block_size": 64, "comm_sms": 1, "num_warps": 4, "us": 1.0}


@pytest.mark.usefixtures("no_heap_files_left_behind")
def test_autotune_off_uses_the_row_of_the_nearest_world_and_says_so(tmp_path):
    write_table(tmp_path / "tables", [{**ROW, "world": 4, "bytes": 1024}, {**ROW, "world": 8, "bytes": 1024,
                                                                           "all_reduce_variant": "ring"}])
    results = run_ranks(2, f"{CASES}:autotune_off_uses_the_nearest_world", str(tmp_path / "tables"), timeout=180,
                        env={"IRIS_AUTOTUNE_CACHE": str(tmp_path / "none.json")})
    for result in results:
        assert result["ok"] and result["choice"] == {"variant": "two_shot", "grid": 1, "block": 64}
        assert len(result["said"]) == 1 and "on 2 ranks" in result["said"][0] and "4 ranks" in result["said"][0]


def test_table_rows_by_size(tmp_path, monkeypatch):
    write_table(tmp_path, [{**ROW, "world": 2, "bytes": 8192, "block_size": 1024},
                           {**ROW, "world": 2, "bytes": 1 << 20, "block_size": 4096}])
    monkeypatch.setattr(tuning, "TABLES", tmp_path)
    tuning.table_rows.cache_clear()
    try:
        row = lambda nbytes: tuning.table_row("cpu", "all_reduce", 2, torch.float32, nbytes)[0]["block_size"]  # noqa
        assert (row(100), row(8192), row(65536), row(1 << 30)) == (1024, 1024, 1024, 4096)
        assert tuning.table_row("cpu", "all_reduce", 4, torch.float32, 8192) == (None, None)
        assert tuning.table_row("cpu", "all_reduce", 2, torch.bfloat16, 8192) == (None, None)
        assert tuning.table_row("cpu", "all_reduce", 3, torch.float32, 8192, nearest_world=True)[1] == 2
    finally:
        tuning.table_rows.cache_clear()


def test_a_cache_of_other_versions_is_not_used_silently(tmp_path, monkeypatch):
    cache = tmp_path / "tuning.json"
    cache.write_text(json.dumps({"versions": {"torch": "0.1", "triton": "0.1"}, "entries": {"k": {"block_size": 16}}}))
    monkeypatch.setenv("IRIS_AUTOTUNE_CACHE", str(cache))
    with pytest.warns(TuningWarning, match="written with .*not used"):
        assert tuning.read_cache() == {}
    cache.write_text("{not json")
    with pytest.warns(TuningWarning, match="could not be read"):
        assert tuning.read_cache() == {}


def test_the_switches(monkeypatch):
    for text, on in (("0", False), ("no", False), ("1", True), ("", True)):
        monkeypatch.setenv("IRIS_AUTOTUNE", text)
        assert tuning.env_autotune() is on
    monkeypatch.setenv("IRIS_AUTOTUNE_BUDGET", "soon")
    with pytest.raises(ValueError, match="IRIS_AUTOTUNE_BUDGET='soon'"):
        tuning.budget_s()
    monkeypatch.setenv("IRIS_AUTOTUNE_BUDGET", "2.5")
    assert tuning.budget_s() == 2.5
    config = Config.autotune(num_warps=4, block_size=2048)
    assert config.tune and tuning.fixed_fields("all_reduce", config) == {"num_warps": 4, "block_size": 2048}
    assert Config().with_defaults().num_warps == 8 and Config(num_warps=2).with_defaults().num_warps == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.cache_key("all_gather", (4, 8), torch.bfloat16, 4, "H200 SXM", {}) == \
            "all_gather|4x8|bfloat16|4|H200 SXM|"
