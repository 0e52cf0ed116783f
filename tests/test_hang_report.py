"""The hang report on the CPU backend: real ranks (ipyparallel engines) stuck in real kernels.

A cell that times out says, before its ranks are interrupted, where each rank that did not finish was: the
kernel, the line, the polled allocation and element with the value read there and the value awaited; the
ranks that finished are named as finished. The clusters are started once per class (starting is the
expensive part); every hung cell gets a short timeout.
"""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from workbench import Workbench, shutdown, whereabouts
from workbench.hang_report import HangReport, RankPlace, display_hang
from workbench.report import RankError

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_heap_files_left_behind")]

TIMEOUT = 3

# Rank 1 waits for a flag that no rank raises; the others finish at once.
TRITON_WAIT = """
flags = ctx.zeros(4, dtype=torch.int32)

@triton.jit
def wait_for_flag(context, flags, RANK: tl.constexpr, WORLD: tl.constexpr):
    dctx = DeviceContext.initialize(context, RANK, WORLD)
    if RANK == 1:
        while dctx.atomic_cas(flags + 2, 1, 1, RANK, sem="acquire", scope="sys") != 1:
            pass

wait_for_flag[(1,)](ctx.get_device_context(), flags, rank, world_size)
"""

GLUON_WAIT = """
flags = ctx.zeros(4, dtype=torch.int32)

@gluon.jit
def gluon_wait(IrisDeviceCtx: gl.constexpr, context, flags, waiter):
    dctx = IrisDeviceCtx.initialize(context)
    if dctx.cur_rank == waiter:
        while dctx.atomic_cas(flags + 2, 1, 1, dctx.cur_rank, sem="acquire", scope="sys") != 1:
            pass

gluon_wait[(1,)](IrisDeviceCtx, ctx.get_device_context(), flags, 1)
"""

# A plain volatile load through a pointer translated by hand, waiting for a value held in a local.
LOAD_WAIT = """
ready = ctx.zeros(8, dtype=torch.int64, name="ready")
ready[5] = 3 if rank == 0 else 0
ctx.barrier()

@triton.jit
def poll_peer(ready, cur_rank, heap_bases, EXPECTED: tl.constexpr):
    if cur_rank == 1:
        remote = iris.device.translate(ready + 5, cur_rank, 0, heap_bases)
        expected = EXPECTED
        while tl.load(remote, volatile=True) < expected:
            pass

poll_peer[(2,)](ready, rank, ctx.get_heap_bases(), EXPECTED=7)
"""

HOST_WAIT = """
import time
if rank == 2:
    for _ in range(600):
        time.sleep(0.05)
"""


def our_socket_files() -> list[str]:
    """Files the hang report would have left in the temporary directory (it uses abstract sockets: none)."""
    return [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(whereabouts.CHANNEL_PREFIX)]


def listening(channel: str) -> list[str]:
    """The abstract sockets of ``channel`` that some process still has (``/proc/net/unix`` shows them as ``@name``)."""
    with open("/proc/net/unix") as table:
        return [line.split()[-1] for line in table if f"@{channel}-" in line]


@pytest.fixture(scope="class")
def wb3():
    wb = Workbench(n=3, backend="cpu", heap_size="16MiB", timeout=60, interrupt_grace=3.0, progress=False).start()
    yield wb
    print(wb.stop())
    assert our_socket_files() == []


@pytest.fixture
def wb(wb3):
    if wb3.broken or not wb3.running:
        wb3.restart()
    return wb3


class TestThreeRanks:
    def test_triton_rank_waiting_on_a_flag_nobody_raises(self, wb):
        started = time.monotonic()
        report = wb.run(TRITON_WAIT, timeout=TIMEOUT)
        assert time.monotonic() - started < TIMEOUT + 10
        assert report.ranks_with("ok") == [0, 2] and report.ranks_with("interrupted") == [1]
        hang = report.hang
        assert [p.state for p in hang.places] == ["finished", "polling", "finished"], report.render()
        waiting = hang.rank(1)
        assert (waiting.kernel, waiting.polls, waiting.reads, waiting.awaits) == ("wait_for_flag", "flags[2]", "0", "1")
        assert waiting.access_kind == "atomic_cas" and waiting.program == (0, 0, 0)
        assert waiting.kernel_line == "cell line 8"
        assert waiting.kernel_source.startswith("while dctx.atomic_cas(flags + 2, 1, 1, RANK")
        assert waiting.line == "cell line 11" and waiting.source.startswith("wait_for_flag[(1,)]")
        text = report.render()
        assert "rank 1 waits in wait_for_flag for flags[2] to be 1; it reads 0." in text
        assert text.index("Where the ranks were:") < text.index("did not finish within 3 s")
        lines = text.splitlines()
        rows = [line.split() for line in lines[lines.index("Where the ranks were:") + 2:][:3]]
        assert [row[:2] for row in rows] == [["0", "finished"], ["1", "polling"], ["2", "finished"]]
        assert wb.pull("rank") == [0, 1, 2]  # the same cluster, still usable
        assert wb.pull("flags.tolist()") == [[0, 0, 0, 0]] * 3

    def test_gluon_rank_waiting_on_a_flag(self, wb):
        report = wb.run(GLUON_WAIT, timeout=TIMEOUT)
        waiting = report.hang.rank(1)
        assert waiting.state == "polling", report.render()
        assert (waiting.state, waiting.kernel, waiting.polls, waiting.reads, waiting.awaits) == (
            "polling", "gluon_wait", "flags[2]", "0", "1")
        assert waiting.kernel_line == "cell line 8"
        assert [report.hang.rank(r).state for r in (0, 2)] == ["finished", "finished"]
        assert "rank 1 waits in gluon_wait for flags[2] to be 1; it reads 0." in str(report)

    def test_volatile_load_on_another_ranks_heap_with_the_awaited_value_in_a_local(self, wb):
        report = wb.run(LOAD_WAIT, timeout=TIMEOUT)
        waiting = report.hang.rank(1)
        assert waiting.state == "polling" and waiting.access_kind == "load"
        assert (waiting.polls, waiting.reads, waiting.awaits) == ("ready[5] of rank 0", "3", ">= 7")
        assert waiting.program == (0, 0, 0) and waiting.kernel_line == "cell line 11"
        assert "rank 1 waits in poll_peer for ready[5] of rank 0 to be >= 7; it reads 3." in str(report)

    def test_rank_stuck_in_host_code_is_reported_with_its_cell_line_and_no_kernel(self, wb):
        report = wb.run(HOST_WAIT, timeout=TIMEOUT)
        stuck = report.hang.rank(2)
        assert stuck.state == "host" and stuck.kernel is None and stuck.polls is None
        assert stuck.line == "cell line 5" and stuck.source == "time.sleep(0.05)"
        assert [report.hang.rank(r).state for r in (0, 1)] == ["finished", "finished"]
        assert "rank 2, cell line 5: time.sleep(0.05)" in report.render()
        assert wb.pull("rank") == [0, 1, 2]

    def test_html_table_and_plain_text_for_the_notebook(self, wb):
        report = wb.run(TRITON_WAIT, timeout=TIMEOUT)
        page = report.hang._repr_html_()
        assert "<table class='iris-hang-table'" in page and "<code>flags[2]</code>" in page and "wait_for_flag" in page
        from IPython.core.formatters import DisplayFormatter

        data, _ = DisplayFormatter().format(report.hang)
        assert set(data) >= {"text/html", "text/plain"} and "rank 1 waits in" in data["text/plain"]

    def test_a_cell_that_finishes_has_no_hang_report(self, wb):
        report = wb.run("x = 1", timeout=30)
        assert report.ok and report.hang is None and "Where the ranks were" not in report.render()


def test_two_ranks_as_the_magic_runs_them_and_nothing_left_behind(no_heap_files_left_behind):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()  # display() publishes through a shell, as in a notebook
    wb = Workbench(n=2, backend="cpu", heap_size="16MiB", timeout=60, interrupt_grace=3.0, progress=False).start()
    try:
        pids, channel = wb.local_pids(), wb.hang_channel
        assert sorted(listening(channel)) == [f"@{channel}-r0", f"@{channel}-r1"]
        # As %%iris_kernel runs a cell: its own line counts, so the kernel's loop is on the cell's line 9.
        report = wb.run(TRITON_WAIT, timeout=TIMEOUT, line_offset=1)
        hang = report.hang
        assert [p.state for p in hang.places] == ["finished", "polling"], [(p.state, p.detail) for p in hang.places]
        assert (hang.rank(1).polls, hang.rank(1).reads, hang.rank(1).awaits) == ("flags[2]", "0", "1")
        assert hang.rank(1).kernel_line == "cell line 9"
        with pytest.raises(RankError) as error:
            report.raise_on_failure()
        assert "rank 1 waits in wait_for_flag for flags[2] to be 1; it reads 0." in str(error.value)
        with capture_output() as shown:  # what the magic shows before raising: an HTML table, text beside it
            display_hang(report)
        (data,) = [output.data for output in shown.outputs]
        assert "<table class='iris-hang-table'" in data["text/html"] and "rank 1 waits in" in data["text/plain"]
        assert wb.pull("rank") == [0, 1]
    finally:
        stop = wb.stop()
    assert stop.ok, str(stop)
    assert our_socket_files() == [] and listening(channel) == []
    assert not [pid for pid in pids if not shutdown.process_gone(pid)]


def test_rank_place_from_an_answer_that_could_not_be_had():
    report = HangReport([RankPlace(0, "unknown", detail="runs on host gpu7: it cannot be asked from here"),
                         RankPlace(1, "finished", detail="error")])
    text = report.render()
    assert "no answer" in text and "runs on host gpu7" in text and "finished (error)" in text
