"""The race detector (``iris.iris(..., check="races")``) on the CPU backend, with 2 and 3 real ranks.

A corpus of buggy kernels (tests/race_kernels.py) must each be flagged on the right allocation and element with
both source lines; the correct corpus (every lesson's kernels, every collective, release/acquire, host and device
barriers, Triton and Gluon) must report no race at all. The rank cases (tests/rank_cases_races.py) run each
corpus scenario by scenario in one set of rank processes, so the whole file costs a few process start-ups.
"""

from __future__ import annotations

import gc
import os

import pytest
import triton
import triton.language as tl

import iris
from iris.heap.cpu import SHM_DIR, heap_file_name, remove_stale_heap_files
from iris.instruments.checking import choose_check, races_html_table, races_text_table
from iris.instruments.checking.races import Access, Race
from iris.interpret import access_events

from .multirank import run_ranks
from .race_kernels import tagged_lines

CASES = "tests.rank_cases_races"
KERNELS = os.path.join(os.path.dirname(__file__), "race_kernels.py")

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def _line(tag):
    (line,) = tagged_lines()[tag]
    return line


def _all_races(results, scenario):
    return [race for result in results for race in result["races"][scenario]]


def _lines(race):
    return sorted((race["first"]["line"], race["second"]["line"]))


def _one_race(results, scenario, allocation, element, tags):
    """The scenario's races are all on ``allocation``; one is on ``element`` between the tagged lines."""
    races = _all_races(results, scenario)
    assert races, f"{scenario}: no race found"
    assert {race["allocation"] for race in races} == {allocation}, races
    lines = sorted(_line(tag) for tag in tags)
    matching = [race for race in races if race["element"] == element and _lines(race) == lines]
    assert matching, f"{scenario}: no race on {allocation}[{element}] between lines {lines}: {races}"
    for race in matching:
        assert {race["first"]["file"], race["second"]["file"]} == {KERNELS}
        assert race["first"]["rank"] != race["second"]["rank"] or race["first"]["program_id"] != race["second"][
            "program_id"]
        text = race["text"]
        assert f"{allocation}[" in text and all(f"race_kernels.py:{line}" in text for line in lines)
    return matching


@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def buggy(request):
    return run_ranks(request.param, f"{CASES}:buggy_corpus", timeout=240)


def test_relaxed_flag_names_the_data_race(buggy):
    (race, *_) = _one_race(buggy, "relaxed_flag", "data", 0, ["message-store", "message-load"])
    assert race["heap_rank"] == 1 and race["kernel"] == "consume"
    assert (race["first"]["kind"], race["second"]["kind"]) == ("store", "load")  # the read came second here
    assert (race["first"]["rank"], race["second"]["rank"]) == (0, 1)
    assert race["first"]["kernel"] == "produce" and race["first"]["program_id"] == [0, 0, 0]


def test_plain_volatile_poll_orders_nothing(buggy):
    races = _all_races(buggy, "volatile_flag")
    assert {race["allocation"] for race in races} == {"data", "flag"}
    assert any(_lines(r) == sorted([_line("message-store"), _line("volatile-load")]) for r in races)
    flag = [r for r in races if r["allocation"] == "flag"]
    assert all(_lines(r) == sorted([_line("flag-xchg"), _line("volatile-poll")]) for r in flag), flag


def test_missing_barrier(buggy):
    _one_race(buggy, "missing_barrier", "inbox", 0, ["put", "read"])


def test_two_writers_of_one_element(buggy):
    races = _one_race(buggy, "two_writers", "target", 0, ["writer-0", "writer-other"])
    assert {races[0]["first"]["kind"], races[0]["second"]["kind"]} == {"store"}


def test_two_programs_of_one_launch(buggy):
    (race,) = _one_race(buggy, "two_programs", "shared", 5, ["program-write", "program-write"])
    assert race["index"] == [1, 2] and "shared[1, 2]" in race["text"]
    assert (race["first"]["rank"], race["second"]["rank"]) == (0, 0)
    assert sorted([race["first"]["program_id"], race["second"]["program_id"]]) == [[0, 0, 0], [1, 0, 0]]


def test_read_before_written_is_found_by_the_writer(buggy):
    (race,) = _one_race(buggy, "read_before_written", "data", 0, ["early-read", "late-write"])
    assert (race["first"]["line"], race["second"]["line"]) == (_line("early-read"), _line("late-write"))
    assert (race["first"]["rank"], race["second"]["rank"]) == (1, 0)


def test_gluon_relaxed_flag(buggy):
    _one_race(buggy, "gluon_relaxed_flag", "gdata", 0, ["gluon-store", "gluon-load"])


def test_one_warning_per_pair_of_lines(buggy):
    for result in buggy:
        races = [race for scenario in result["races"].values() for race in scenario]
        pairs = {tuple(_lines(race)) for race in races}
        assert len(result["warnings"]) == len(pairs), result
        assert all(message.startswith("race on ") for message in result["warnings"])


@pytest.mark.parametrize("world", [2, 3])
def test_correct_corpus_has_no_race(world):
    results = run_ranks(world, f"{CASES}:correct_corpus", timeout=300)
    control = results[0]["races"].pop("control")
    assert [race["allocation"] for race in control] == ["shared"]  # still checking after the whole corpus
    found = {name: races for result in results for name, races in result["races"].items()
             if races and name != "control"}
    assert found == {}, "\n".join(race["text"] for races in found.values() for race in races)
    assert set(results[0]["races"]) >= {"lesson_02", "lesson_07", "collectives", "device_barrier"}


# What each protocol moves: its closing or opening signal orders it.
RELAXED_NAMES = {"broadcast_out", "scatter_out", "gather_out", "reduce_two_shot", "ccl.reduce.push:0.scratch",
                 "ccl.p2p.stage", "ccl.p2p.sizes", "ring_gathered", "ccl.all_to_all_v.pull.scratch"}


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_rooted_collectives_and_p2p_race_free_and_their_relaxed_twins_named(world):
    relaxed = world == 2  # every protocol's data is named at 2 ranks already: the others check for no race alone
    results = run_ranks(world, f"{CASES}:rooted_and_p2p_race_free", relaxed, timeout=400)
    clean = [race["text"] for result in results for race in result["races"]["rooted_and_p2p"]]
    assert clean == [], "\n".join(clean)
    if relaxed:
        named = {race["allocation"] for result in results for race in result["races"]["relaxed"]}
        assert named == RELAXED_NAMES, named  # every protocol's data, and nothing of it races when it releases


# -- in this process: a world of one ------------------------------------------------------------------

@triton.jit
def _programs_store_one(out):
    tl.store(out, tl.program_id(0).to(tl.float32))


@triton.jit
def _program_stores_own(out):
    tl.store(out + tl.program_id(0), 1.0)


def test_world_of_one_reports_and_forgets():
    ctx = iris.iris("1MiB", backend="cpu", check="races")
    assert ctx.check == "races"
    out = ctx.zeros(4, name="out")
    with pytest.warns(iris.RaceWarning, match=r"race on out\[0\].*program \(0, 0, 0\).*program \(1, 0, 0\)"):
        _programs_store_one[(3,)](out)
    races = ctx.races()
    assert [(r.allocation, r.element, r.first.program_id, r.second.program_id) for r in races] == [
        ("out", 0, (0, 0, 0), (1, 0, 0)), ("out", 0, (1, 0, 0), (2, 0, 0))]
    assert ctx.races() == []  # forgotten
    _program_stores_own[(4,)](out)  # programs on their own elements, then a new launch on the same ones
    _program_stores_own[(4,)](out)
    wide = ctx.zeros(100, name="wide")
    _program_stores_own[(100,)](wide)  # more programs than threads per rank: some share one, still no race
    _programs_store_one[(100,)](wide)
    assert {race.element_name for race in ctx.races()} == {"wide[0]"}
    del ctx, out
    gc.collect()
    assert access_events._observers == []  # the checker went with its context


def test_check_is_validated_with_what_to_do(monkeypatch):
    with pytest.raises(ValueError, match="rank 0: unknown check='race'.*'races'"):
        iris.iris("1MiB", backend="cpu", check="race")
    monkeypatch.setenv("IRIS_CHECK", "bogus")
    with pytest.raises(ValueError, match="IRIS_CHECK='bogus'"):
        choose_check(None, "cpu", 0)
    monkeypatch.setenv("IRIS_CHECK", "races")
    assert choose_check(None, "cpu", 0) == "races"
    assert choose_check("none", "cpu", 0) is None
    with pytest.raises(NotImplementedError, match="rank 3: IRIS_CHECK='races' needs the CPU backend.*backend='cpu'"):
        choose_check(None, "cuda", 3)
    monkeypatch.delenv("IRIS_CHECK")
    ctx = iris.iris("1MiB", backend="cpu")
    assert ctx.check is None
    with pytest.raises(RuntimeError, match="rank 0: ctx.races\\(\\) needs the race checker.*check='races'"):
        ctx.races()


def test_race_text_and_tables():
    first = Access(0, (0, 0, 0), "store", "/x/kernels.py", 12, "produce")
    second = Access(1, (2, 0, 0), "load", "/x/kernels.py", 20, "consume")
    race = Race("consume", "C", 256, 5, (1, 1), 1, first, second)
    assert str(race) == (
        "race on C[1, 1] (rank 1's heap): store at kernels.py:12 (rank 0, program (0, 0, 0), kernel produce) and "
        "load at kernels.py:20 (rank 1, program (2, 0, 0), kernel consume) are not ordered")
    assert race.accesses == (first, second)
    text = races_text_table([race])
    assert text.splitlines()[0].split() == ["kernel", "element", "heap", "of", "first", "access", "second", "access"]
    assert "C[1, 1]" in text.splitlines()[2]
    assert races_text_table([]) == "no races"
    table = races_html_table([race])
    assert races_html_table([]) == "<p>no races</p>"
    # The element and whose heap never wrap (Chromium's check of the pages: tests/browser/layout.py) ...
    assert "white-space:nowrap'>C[1, 1]</td>" in table and "white-space:nowrap'>rank 1</td>" in table
    # ... and a narrow access column wraps between phrases, never inside one ("program (0," / "0, 0)").
    unbroken = '<span style="white-space:nowrap">'
    assert (f"vertical-align:top;text-align:left'>{unbroken}store at kernels.py:12</span> {unbroken}(rank 0,</span> "
            f"{unbroken}program (0, 0, 0),</span> {unbroken}kernel produce)</span></td>") in table


def test_stale_shadow_files_are_removed():
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    name = heap_file_name("feedbeef", 0, "shadow").replace(f"-p{os.getpid()}-", f"-p{dead}-")
    open(os.path.join(SHM_DIR, name), "w").close()
    assert name in remove_stale_heap_files()
    assert not os.path.exists(os.path.join(SHM_DIR, name))
