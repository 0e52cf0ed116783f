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
    run (see the module docstring); what happened, in a sentence."""
    first, second = race.first, race.second

    def second_done(step) -> bool:
        return step.rank == second.rank and _is(step, second, race.heap_rank)

    if first.rank != second.rank:
        coordinator.run_first([second.rank, first.rank], until=second_done)
    coordinator.run_first([first.rank, second.rank])
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
    """In which order ``race``'s two accesses came in ``transcript``, and the values each read or wrote."""
    found = {"first": _step_of(transcript, race.first, race.heap_rank),
             "second": _step_of(transcript, race.second, race.heap_rank)}
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
