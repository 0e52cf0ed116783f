"""A race the checker found, made to happen the other way round: its two accesses in the order the checker did not see.

The race checker (:mod:`iris.instruments.checking`) reports two accesses to one element that nothing orders, in the
order it saw them (``first``, ``second``). Nothing orders them, so the other order can happen too, and then the value
read differs: a sum made before a put landed reads zeros (a missing barrier); a peer's next store lands before this
rank read the last one (a buffer reused too early); two ranks both read before either writes, and one update is lost
(two writers). :func:`make_it_happen` steps the ranks to take the accesses the other way round: the rank of the
second access goes first until it has taken that access, then the rank of the first. The transcript shows the value
on the line that reads it, and :func:`what_happened` says it in a sentence. The steps are recorded as any steps are:
save them, and the same interleaving replays exactly. The same preference on the fixed code shows it holding.

The stepper runs accesses one at a time, each seen by every rank at once (sequential consistency). A race that needs
a GPU's weaker ordering to go wrong (a relaxed flag: the flag's store may land before the message's) cannot be
turned round here, since the flag is still polled until it is set; :func:`what_happened` then says that the run kept
the checker's order rather than show a wrong value that did not occur.

To walk the race by hand instead, :func:`hold_before_race` steps the ranks as :func:`make_it_happen` does but stops
with the rank of the second access held before it: the next step of that rank takes it first. Both mark the race in
the transcript (:attr:`.transcript.Transcript.race`): its two steps, once taken, are shaded and name each other.

Examples
--------
>>> print(make_it_happen(coordinator, race))                       # doctest: +SKIP
the other order than the checker saw: rank 0's load at line 14 (step 4, inbox of rank 0) read 0, 0, 0, 0, then ...
"""

from __future__ import annotations

from .transcript import Transcript, _values


def race_order(race) -> list[int]:
    """The ranks in the order they go when ``race`` is made to happen: the second access's rank first."""
    return list(dict.fromkeys([race.second.rank, race.first.rank]))


def make_it_happen(coordinator, race) -> str:
    """Step ``coordinator``'s ranks to their end taking ``race``'s accesses the other way round from the checker's
    run (see the module docstring), from wherever they are (held by :func:`hold_before_race`, for one); what
    happened, in a sentence."""
    first, second = race.first, race.second
    coordinator.transcript.race = race

    def second_done(step) -> bool:
        return step.is_access(second, race.heap_rank)

    if first.rank != second.rank and coordinator.transcript.step_of(second, race.heap_rank) is None:
        coordinator.run_first([second.rank, first.rank], until=second_done)
    coordinator.run_first([first.rank, second.rank])
    return what_happened(coordinator.transcript, race)


def hold_before_race(coordinator, race) -> str:
    """Step ``coordinator``'s ranks as :func:`make_it_happen` would, and stop where the rank of ``race``'s second
    access is held before it: its next step takes it, before the other access. What is held where, in a sentence
    (or, when the run never got there, what happened instead)."""
    first, second = race.first, race.second
    coordinator.transcript.race = race

    def at_second(rank: int, operation: dict | None) -> bool:
        return rank == second.rank and operation is not None and _takes(operation, second, race.heap_rank)

    if first.rank != second.rank:
        coordinator.run_first([second.rank, first.rank], before=at_second)
    held = coordinator.ranks[second.rank]
    if coordinator.done or not (held.state == "paused" and at_second(second.rank, held.operation)):
        return f"the run did not stop before the race: {what_happened(coordinator.transcript, race)}"
    other = coordinator.ranks[first.rank]
    where = f"held before {other.operation['label']} at line {other.operation['line']}" if other.held else (
        coordinator.describe(other))
    return (f"held before the race, the other way round from the checker's run: rank {second.rank}'s "
            f"{second.kind} at line {second.line} ({held.operation['label']}) goes first when rank {second.rank} "
            f"takes its next step; rank {first.rank}'s {first.kind} at line {first.line} comes after it (rank "
            f"{first.rank} is {where})")


def _takes(operation: dict, access, heap_rank: int) -> bool:
    """Whether ``operation`` (what a rank is held before) is ``access`` on ``heap_rank``'s heap."""
    return (operation["line"] == access.line and operation["kind"] == access.kind
            and any(t["rank"] == heap_rank for t in operation["targets"]))


def what_happened(transcript: Transcript, race) -> str:
    """In which order ``race``'s two accesses came in ``transcript``, and the values each read or wrote."""
    found = {"first": transcript.step_of(race.first, race.heap_rank),
             "second": transcript.step_of(race.second, race.heap_rank)}
    missing = [race.first if name == "first" else race.second for name, step in found.items() if step is None]
    if missing:
        return (f"the run took no {missing[0].kind} at line {missing[0].line} on rank {missing[0].rank}: this order "
                "does not reach the race")
    (earlier, a), (later, b) = sorted([(found["first"], race.first), (found["second"], race.second)],
                                      key=lambda pair: pair[0].index)

    def said(step, access) -> str:
        target = next(t for t in step.operation["targets"] if t["rank"] == race.heap_rank)
        if access.kind == "load":
            did = f"read {_values(step.before)}"
        elif access.kind == "store":
            did = f"wrote {_values(step.after)}"
        else:
            did = f"found {_values(step.before)} and left {_values(step.after)}"
        return (f"rank {access.rank}'s {access.kind} at line {access.line} (step {step.index}, {target['name']} of "
                f"rank {race.heap_rank}) {did}")

    if a is race.second:
        return f"the other order than the checker saw: {said(earlier, a)}, then {said(later, b)}"
    return (f"the order the checker saw, still: {said(earlier, a)}, then {said(later, b)}. The run kept them in this "
            "order: the protocol orders them, or the stepper cannot turn them round (it runs accesses one at a time, "
            "seen by every rank at once, so a race that needs a GPU's weaker ordering, such as a relaxed flag, "
            "cannot show a wrong value here)")
