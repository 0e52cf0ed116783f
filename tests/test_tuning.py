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

import iris
from iris.ccl import AUTOTUNE, Config, TuningWarning, tuning
from iris.ccl.config import AMD_TUNED_FIELDS, TUNABLE_FIELDS

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
        assert tuning.env_autotune() is on and tuning.autotune_on() is on  # read at each call, as upstream's
    tuning.set_autotune(True)
    try:
        assert tuning.autotune_on()  # a program's word wins over the environment
    finally:
        tuning.set_autotune(None)
    with pytest.raises(TypeError, match="use True, False or None"):
        tuning.set_autotune(0)
    # IRIS_AUTOTUNE_BUDGET counts candidate configs (upstream's); seconds are written with an s
    monkeypatch.delenv("IRIS_AUTOTUNE_BUDGET", raising=False)
    assert tuning.budget() == ("candidates", 50)
    for text, budget in (("7", ("candidates", 7)), ("20s", ("seconds", 20.0)), ("2.5s", ("seconds", 2.5))):
        monkeypatch.setenv("IRIS_AUTOTUNE_BUDGET", text)
        assert tuning.budget() == budget
    for text in ("soon", "2.5", "0", "-3", "0s"):
        monkeypatch.setenv("IRIS_AUTOTUNE_BUDGET", text)
        with pytest.raises(ValueError, match=f"IRIS_AUTOTUNE_BUDGET={text!r}: give the number of candidate configs "
                                             ".* or seconds with an s, e.g. 20s"):
            tuning.budget()
    config = Config.autotune(num_warps=4, block_size=2048)
    assert not config.tune and tuning.fixed_fields("all_reduce", config) == {"num_warps": 4, "block_size": 2048}
    assert set(config.get_autotune_fields()) == set(TUNABLE_FIELDS) - {"num_warps", "block_size"}
    assert Config().with_defaults().num_warps == 8 and Config(num_warps=2).with_defaults().num_warps == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.cache_key("all_gather", (4, 8), torch.bfloat16, 4, "H200 SXM", {}) == \
            "all_gather|4x8|bfloat16|4|H200 SXM|"


def test_the_sentinel_in_every_tunable_field():
    assert repr(AUTOTUNE) == "AUTOTUNE" and AUTOTUNE is iris.ccl.AUTOTUNE
    for name in TUNABLE_FIELDS:
        config = Config(**{name: AUTOTUNE})
        assert config.get_autotune_fields() == [name], name
        resolved = config.with_defaults()  # what a kernel runs with where nothing tuned it
        assert resolved.get_autotune_fields() == []
        if name in AMD_TUNED_FIELDS:  # nothing to tune here: upstream's default
            assert getattr(resolved, name) == getattr(Config(), name)
    assert Config.autotune().with_defaults() == Config().with_defaults()
    # the older spelling of Config.autotune(): every tunable field left unset
    assert set(Config(tune=True).get_autotune_fields()) == set(TUNABLE_FIELDS) - set(AMD_TUNED_FIELDS)
    assert Config.get_tunable_fields("all_to_all") == ["all_to_all_variant", "block_size_m", "block_size_n",
                                                       "comm_sms", "num_warps"]
    assert Config(num_warps=2).with_resolved(num_warps=4).num_warps == 4
    # a sentinel is checked as what it stands for: values beside it are still checked
    with pytest.raises(ValueError, match="block_size=100"):
        Config(all_reduce_variant=AUTOTUNE, block_size=100)
    # the rooted collectives tune their variant too (broadcast's serves gather and scatter)
    assert Config(broadcast_variant=AUTOTUNE).get_autotune_fields() == ["broadcast_variant"]
    assert Config.get_tunable_fields("reduce") == ["reduce_variant", "block_size", "comm_sms", "num_warps"]
    with pytest.raises(ValueError, match="broadcast_variant='tree'"):
        Config(broadcast_variant="tree")
    with pytest.raises(ValueError, match="use_gluon is not a tunable field; the tunable ones are all_reduce_variant"):
        Config(use_gluon=AUTOTUNE)
    with pytest.raises(TypeError, match="no Config field named colour"):
        Config.autotune(colour="red")
    with pytest.raises(TypeError, match="sentinel, not a switch.*autotune_on"):
        bool(AUTOTUNE)
    import copy
    import pickle

    assert copy.deepcopy(AUTOTUNE) is AUTOTUNE and pickle.loads(pickle.dumps(AUTOTUNE)) is AUTOTUNE
    assert tuning.cache_key("all_reduce", (8,), torch.float32, 2, "cpu", {"block_size": 64}, ["all_reduce_variant"]) \
        == "all_reduce|8|float32|2|cpu|block_size=64|tuned=all_reduce_variant"


def test_the_earlier_switch_still_switches_and_says_what_changed():
    try:
        with pytest.warns(DeprecationWarning, match=r"iris.ccl.AUTOTUNE = False: AUTOTUNE is upstream Iris's sentinel "
                                                    r"now.*iris.ccl.tuning.set_autotune\(False\)") as said:
            iris.ccl.AUTOTUNE = False
        assert said[0].filename == __file__  # points at the program's assignment
        assert not tuning.autotune_on() and iris.ccl.AUTOTUNE is AUTOTUNE
        with pytest.warns(DeprecationWarning):
            iris.ccl.AUTOTUNE = True
        assert tuning.autotune_on()
    finally:
        tuning.set_autotune(None)


@pytest.mark.usefixtures("no_heap_files_left_behind")
def test_autotune_sentinel_on_cpu_ranks(tmp_path):
    cache = tmp_path / "tuning.json"
    results = run_ranks(2, f"{CASES}:autotune_sentinel_on_cpu_ranks", timeout=240,
                        env={"IRIS_AUTOTUNE_CACHE": str(cache)})
    for rank, done in enumerate(results):
        assert done["refused_ok"] and len(done["refused_said"]) == 1, (rank, done["refused_said"])
        assert "all_reduce with all_reduce_variant=AUTOTUNE: not tuned" in done["refused_said"][0]
        assert "CPU interpreter" in done["refused_said"][0]
        assert done["off_ok"] and done["off_said"] == []
        assert done["tuned_ok"] and done["again_ok"] and done["again_said"] == []
        assert done["again"] == done["tuned"] == results[0]["tuned"]  # rank 0's winner, then the cache's answer
        assert done["tuned"]["block"] == 64  # the field given is kept
        assert done["broadcast_ok"] and done["untuned_ok"] and done["switched_off"]
        assert done["broadcast_ran"] == results[0]["broadcast_ran"] == "push"  # the CPU has no copy engines
        assert len(done["switch_said"]) == 1 and "set_autotune(False)" in done["switch_said"][0]
    (key, entry), = (item for item in results[0]["cache"]["entries"].items() if item[0].startswith("all_reduce"))
    assert key == "all_reduce|384|float32|2|cpu|block_size=64|tuned=all_reduce_variant"
    assert set(entry) == {"all_reduce_variant", "us", "gpu", "date"}  # the variant alone was tuned
    assert entry["all_reduce_variant"] == results[0]["tuned"]["variant"]
    printed = results[0]["printed"]  # rank 0 prints; 2 candidates (the budget), then the winner
    assert len(printed) == 3 and "[2]" in printed[1] and "2 of at most 2 candidates" in printed[2], printed
    assert results[1]["printed"] == []
