"""Stepping a distributed kernel on CPU ranks (iris.instruments.stepping): real rank processes, a coordinator here.

Lesson 03's message passing: rank 0 stores 4 floats into rank 1's mailbox and raises rank 1's flag; rank 1 polls
its flag, then copies the mailbox. The coordinator holds both ranks before every heap access and steps them.
"""

from __future__ import annotations

import struct

import pytest

from iris.instruments.stepping import Coordinator, Order, OrderDiverged

from .multirank import our_heap_files, start_ranks, stop

MESSAGE = [42.0, 42.5, 43.0, 43.5]
CASE = "tests.rank_cases_stepping:message_passing"


@pytest.fixture
def coordinator():
    with Coordinator(2) as c:
        yield c


def started(coordinator, *args, case=CASE):
    ranks = start_ranks(2, case, coordinator.address, *args, warm=True)
    try:
        coordinator.wait_until_held(timeout=120)
    except BaseException:
        stop(ranks)
        raise
    return ranks


def finish(coordinator, ranks) -> list:
    """The ranks' results once they end (a run left part way is stopped first, so that no rank stays held)."""
    if not coordinator.done:
        coordinator.stop("the test ended part way")
    try:
        codes = [r.process.wait(timeout=60) for r in ranks]
    finally:
        stop(ranks)
    assert codes == [0, 0], (codes, [r.log()[-2000:] for r in ranks])
    return [r.result() for r in ranks]


def rank1_heap(coordinator, offsets) -> dict:
    """Rank 1's mailbox, flag and received now, read through the ranks' gates (the heaps between steps)."""
    mailbox = list(struct.unpack("4f", coordinator.read(1, offsets["mailbox"], 16)))
    flag = struct.unpack("i", coordinator.read(1, offsets["flag"], 4))[0]
    received = list(struct.unpack("4f", coordinator.read(1, offsets["received"], 16)))
    return {"mailbox": mailbox, "flag": flag, "received": received}


def allocations(coordinator) -> dict:
    """Allocation name -> offset, as rank 1's gate says them."""
    return {a["name"]: a["offset"] for a in coordinator.ranks[1].operation["allocations"]}


def test_message_passing_under_a_scripted_order_with_every_heap_checked_between_steps(coordinator):
    ranks = started(coordinator)
    try:
        rank0, rank1 = coordinator.ranks
        assert rank0.operation["label"] == "iris.store" and rank0.operation["targets"][0]["rank"] == 1
        assert rank1.operation["kind"] == "atomic_cas" and rank1.operation["targets"][0]["name"] == "flag"
        offsets = allocations(coordinator)
        assert offsets["mailbox"] == rank0.operation["targets"][0]["allocation"]
        empty = {"mailbox": [0.0] * 4, "flag": 0, "received": [0.0] * 4}
        assert rank1_heap(coordinator, offsets) == empty

        # rank 1 polls twice: nothing changes, and it is seen to wait on its flag, which rank 0's next step does not
        # write (rank 0 is about to store the message), so no held rank can release it yet
        for _ in range(2):
            coordinator.step(1)
            assert rank1_heap(coordinator, offsets) == empty
        assert "waits on flag[0] of rank 1" in coordinator.waiting_on(1)
        coordinator.step(0)  # the message lands
        assert rank1_heap(coordinator, offsets) == {**empty, "mailbox": MESSAGE}
        assert "rank 0 next writes there" in coordinator.waiting_on(1)
        coordinator.step(1)  # one more poll: the flag is still down
        assert rank1_heap(coordinator, offsets) == {**empty, "mailbox": MESSAGE}
        coordinator.step(0)  # the flag goes up
        assert rank1_heap(coordinator, offsets) == {**empty, "mailbox": MESSAGE, "flag": 1}
        assert rank0.state == "barrier"
        coordinator.step(1)  # the poll that sees it
        assert rank1.operation["kind"] == "load" and rank1.operation["targets"][0]["name"] == "mailbox"
        coordinator.step(1)  # the load
        coordinator.step(1)  # the store into received
        assert rank1_heap(coordinator, offsets) == {"mailbox": MESSAGE, "flag": 1, "received": MESSAGE}
        coordinator.step(0)  # into the barrier: it waits for rank 1
        assert rank0.state == "in barrier"
        coordinator.step(1)
        coordinator.wait_until_held()
    finally:
        results = finish(coordinator, ranks)
    assert results[1]["received"] == MESSAGE
    assert coordinator.done and [s.state for s in coordinator.ranks] == ["finished", "finished"]
    rows = coordinator.transcript.rows()
    assert [row[1] for row in rows] == ["1", "1", "0", "1", "0", "1", "1", "1", "0", "1"]
    assert rows[2][3] == "iris.store (store)" and rows[2][6:] == ["0, 0, 0, 0", "42, 42.5, 43, 43.5"]
    assert rows[5][6:] == ["1", "1"], "the poll after the flag went up reads 1 when it is taken"


def heap_bytes(coordinator) -> bytes:
    """Every rank's allocations, byte for byte, read now."""
    allocations = next(s.operation for s in coordinator.ranks if s.operation)["allocations"]
    return b"".join(coordinator.read(rank, a["offset"], a["nbytes"]) for rank in range(2) for a in allocations)


def test_a_recorded_order_replays_bit_for_bit_from_its_file(coordinator, tmp_path):
    ranks = started(coordinator)
    snapshots = []
    try:
        for rank in (1, 0, 1, 0, 1):  # a poll, the message, a poll, the flag, the poll that sees it
            coordinator.step(rank)
            snapshots.append(heap_bytes(coordinator))
        coordinator.run_to_end()
    finally:
        first = finish(coordinator, ranks)
    saved = coordinator.order.save(tmp_path / "message.order.json")
    recorded = [(row, step.before, step.after) for row, step in zip(coordinator.transcript.rows(),
                                                                     coordinator.transcript.steps, strict=True)]
    with Coordinator(2) as again:
        ranks = started(again)
        try:
            order = Order.load(saved)
            head, rest = Order(order.entries[:5]), Order(order.entries[5:])
            for index, entry in enumerate(head.entries):  # the heaps between steps, byte for byte
                again.replay(Order([entry]))
                assert heap_bytes(again) == snapshots[index], f"the heaps differ after step {index}"
            again.replay(rest)
            again.wait_until_held()
        finally:
            second = finish(again, ranks)
        assert again.order == coordinator.order
        assert [(row, step.before, step.after) for row, step in zip(again.transcript.rows(), again.transcript.steps,
                                                                    strict=True)] == recorded
    assert second == first


def test_an_order_that_no_longer_fits_the_kernel_says_where_it_diverged_and_leaves_nothing(coordinator, tmp_path):
    before = our_heap_files()
    ranks = started(coordinator)
    try:
        coordinator.run_to_end()
    finally:
        finish(coordinator, ranks)
    with Coordinator(2) as again:
        ranks = started(again, False)  # rank 1 no longer waits for the flag: it loads the mailbox at once
        try:
            first_of_rank1 = coordinator.order.ranks.index(1)  # rank 0's steps before it still fit
            with pytest.raises(OrderDiverged, match=rf"diverged at step {first_of_rank1}: it expects rank 1 before "
                                                    r"atomic_cas consume line \d+, but rank 1 is held before load "
                                                    r"consume_without_waiting"):
                again.replay(coordinator.order)
            again.stop("the test stops it")
            codes = [r.process.wait(timeout=60) for r in ranks]
        finally:
            stop(ranks)
        assert all(code != 0 for code in codes), "each rank's kernel ends with SteppingStopped"
        assert "the stepped run was stopped: the test stops it" in ranks[1].log_path.read_text()
    assert our_heap_files() <= before


def test_a_body_that_never_touches_a_heap_takes_no_step(coordinator):
    ranks = started(coordinator, case="tests.rank_cases_stepping:no_heap_access")
    finish(coordinator, ranks)
    assert coordinator.done and [s.steps for s in coordinator.ranks] == [0, 0]
    assert coordinator.nothing_to_step == [0, 1]
