"""A race the checker found, made to happen: an order that puts the reading access before the write, and what it read.

The race checker (:mod:`iris.instruments.checking`) reports two accesses to one element that nothing orders. Their
order in a run decides the value read, so the stepper can choose it (:func:`make_it_happen`): the rank of the
*reading* access goes first until it has taken that access, then the *writing* rank goes first. For a missing
barrier or flag the read then sees the value from before the write; for two writers that both read first (a
lost update) both read before either writes. The transcript shows the wrong value on the line that reads it
(:func:`what_happened` says it in a sentence), and the steps are recorded as any steps are: save them, and the same
interleaving replays exactly. The same preference on the fixed code shows it holding.

The stepper runs accesses one at a time, each seen by every rank at once (sequential consistency). A race that needs
a GPU's weaker ordering to go wrong (a relaxed flag: the flag's store may land before the message's) takes its steps
in program order here, so the values come out right; :func:`what_happened` says so rather than show a wrong value
that did not occur.

Examples
--------
>>> print(make_it_happen(coordinator, race))                       # doctest: +SKIP
rank 0's load at line 14 (step 5, inbox of rank 0) read 0, 0, 0, 0 before rank 1's store at line 9 (step 7, ...
"""

from __future__ import annotations

from .transcript import Transcript, _values


def race_order(race) -> tuple:
    """``(reader, writer)``: the race's two accesses, the one that reads first (a load, or an atomic, which reads
    too); of two plain writes, the second the checker saw."""
    first, second = race.first, race.second
    if first.kind != "store" and second.kind == "store":
        return first, second
    return second, first


def make_it_happen(coordinator, race) -> str:
    """Step ``coordinator``'s ranks to their end so that ``race``'s reading access comes before its write (see the
    module docstring); what happened, in a sentence."""
    reader, writer = race_order(race)

    def reader_done(step) -> bool:
        return step.rank == reader.rank and _is(step, reader, race.heap_rank)

    if reader.rank != writer.rank:
        coordinator.run_first([reader.rank, writer.rank], until=reader_done)
    coordinator.run_first([writer.rank, reader.rank])
    return what_happened(coordinator.transcript, race)


def _is(step, access, heap_rank: int) -> bool:
    op = step.operation
    return (op["line"] == access.line and op["kind"] == access.kind
            and any(t["rank"] == heap_rank for t in op["targets"]))


def _step_of(transcript: Transcript, access, heap_rank: int):
    """The first step of ``access``'s rank, line and kind on ``heap_rank``'s heap, None if none was taken."""
    return next((step for step in transcript.steps if step.rank == access.rank and _is(step, access, heap_rank)),
                None)


def what_happened(transcript: Transcript, race) -> str:
    """Whether ``race``'s reading access came before its write in ``transcript``, and what it read."""
    reader, writer = race_order(race)
    read, wrote = _step_of(transcript, reader, race.heap_rank), _step_of(transcript, writer, race.heap_rank)
    if read is None or wrote is None:
        missing = reader if read is None else writer
        return (f"the run took no {missing.kind} at line {missing.line} on rank {missing.rank}: this order does not "
                "reach the race")

    def said(step, access):
        target = next(t for t in step.operation["targets"] if t["rank"] == race.heap_rank)
        return (f"rank {access.rank}'s {access.kind} at line {access.line} (step {step.index}, "
                f"{target['name']} of rank {race.heap_rank})")

    if read.index < wrote.index:
        return (f"{said(read, reader)} read {_values(read.before)} before {said(wrote, writer)} wrote "
                f"{_values(wrote.after)} there: the value from before the write, as the race allows")
    return (f"{said(wrote, writer)} came before {said(read, reader)}, which read {_values(read.before)}: in this "
            "run the two are ordered (the stepper runs accesses one at a time, seen by every rank at once; a race "
            "that needs a GPU's weaker ordering, such as a relaxed flag, cannot show a wrong value here)")
