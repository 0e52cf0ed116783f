"""The other side of a stepped run: hold every rank at its next heap access and let them go in the order asked.

Each rank's gate (:mod:`.gate`) connects to the coordinator's socket and reports where it is: paused before an
operation, before a host barrier, inside one (waiting for the others), or at the end of its cell. The coordinator
lets one rank take one step at a time and waits until that rank is held again, so that the heaps between two steps
are exactly what the steps so far made. Every step is recorded (:class:`.order.Order`): replaying the order gives
the same interleaving, and so the same heaps, bit for bit. Every step's values before and after are kept for the
transcript (:class:`.transcript.Transcript`).

Examples
--------
>>> coordinator = Coordinator(world_size=2)                  # then each rank: with stepped(ctx, coordinator.address)
>>> coordinator.wait_until_held()                            # doctest: +SKIP
>>> coordinator.step(0); coordinator.step(1)                 # doctest: +SKIP
>>> coordinator.run_to_end()                                 # doctest: +SKIP
>>> print(coordinator.transcript)                            # doctest: +SKIP
"""

from __future__ import annotations

import base64
import itertools
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

from .order import Order, OrderDiverged
from .protocol import Channel
from .transcript import Step, Transcript, element_phrase

WAITING_POLLS = 2  # a rank that read the same values this many times in a row waits on them (a flag)
SETTLE_SECONDS = 60.0  # how long a step may take (the rank runs host code until its next access)
MAX_STEPS = 100_000


class SteppingError(RuntimeError):
    """A step that cannot be taken: the rank is not held, has finished, or did not come back in time."""


@dataclass
class RankState:
    """Where one rank is: ``connecting``, ``paused`` (``operation``), ``barrier`` (before a host barrier),
    ``in barrier`` (let in, waiting for the others), ``running`` (told to go, not held again yet), ``finished``,
    ``failed`` (``error``) or ``gone`` (its connection closed without a word)."""

    rank: int
    state: str = "connecting"
    operation: dict | None = None
    error: str | None = None
    steps: int = 0
    pid: int | None = None
    polls: int = 0  # consecutive steps of the same operation reading the same values: a wait
    before: list | None = None  # the values its last step found
    after: list | None = None  # and left
    channel: Channel | None = field(default=None, repr=False)

    @property
    def held(self) -> bool:
        """Waiting for a step (paused before an access, or before a host barrier)."""
        return self.state in ("paused", "barrier")

    @property
    def ended(self) -> bool:
        return self.state in ("finished", "failed", "gone")

    @property
    def settled(self) -> bool:
        """Not moving until someone steps it (or another rank joins its barrier)."""
        return self.held or self.ended or self.state == "in barrier"


class Coordinator:
    """Listens for the ranks' gates, holds them, and steps them (see the module docstring).

    Parameters
    ----------
    world_size : int
        Ranks that will connect.
    folder : str, optional
        Where the socket goes (a new private folder by default, removed by :meth:`close`).
    """

    def __init__(self, world_size: int, folder: str | None = None):
        self.world_size = world_size
        self._own_folder = folder is None
        self.folder = folder or tempfile.mkdtemp(prefix="iris-step-")
        os.chmod(self.folder, 0o700)
        # A name of its own per run: a rank whose engine starts an earlier, stopped run's cell late (a loaded machine)
        # must not reach this run's coordinator in the same folder and be stepped as this run's rank (seen once in
        # CI: a rank "at the end of its cell" while its other cell had not started); it finds no socket and fails.
        self.address = os.path.join(self.folder, f"coordinator-{uuid.uuid4().hex[:12]}")
        self.ranks = [RankState(rank) for rank in range(world_size)]
        self.order = Order()
        self.transcript = Transcript()
        self._changed = threading.Condition()
        self._releases = 0  # host barriers every rank has entered and been let out of, counted
        self._replies: dict = {}
        self._ids = itertools.count()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen(world_size)
        self._closed = False
        threading.Thread(target=self._accept, name="iris-step-coordinator", daemon=True).start()

    # -- waiting -------------------------------------------------------------------------------------------
    def wait_until_held(self, ranks=None, timeout: float = SETTLE_SECONDS) -> None:
        """Wait until every rank of ``ranks`` (default all) is held, in a barrier, or at its end."""
        wanted = range(self.world_size) if ranks is None else ranks
        deadline = time.monotonic() + timeout
        with self._changed:
            while not all(self.ranks[r].settled for r in wanted):
                left = deadline - time.monotonic()
                if left <= 0:
                    moving = [r for r in wanted if not self.ranks[r].settled]
                    raise SteppingError(
                        f"ranks {moving} did not reach their next heap access within {timeout:g} s (states: "
                        f"{', '.join(self.ranks[r].state for r in moving)}): they run host code, or wait in a "
                        "collective for ranks that are held")
                self._changed.wait(left)

    def _wait_for(self, condition, what: str, timeout: float = SETTLE_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SteppingError(f"the ranks did not go on within {timeout:g} s, waiting {what}: "
                                        f"{self.summary()}")
                self._changed.wait(left)

    @property
    def nothing_to_step(self) -> list[int]:
        """Ranks that ended without reaching a single heap access (a stepped cell that has nothing to step)."""
        return [s.rank for s in self.ranks if s.ended and s.steps == 0 and not self.order.ranks.count(s.rank)]

    @property
    def done(self) -> bool:
        """Every rank has ended (finished, failed or gone)."""
        return all(state.ended for state in self.ranks)

    # -- stepping -----------------------------------------------------------------------------------------
    def step(self, rank: int, timeout: float = SETTLE_SECONDS) -> Step:
        """Let ``rank`` take its next step and wait until it is held again (or in a barrier, or at its end); the
        step taken, as the transcript has it."""
        state = self.ranks[rank]
        with self._changed:
            if not state.held:
                raise SteppingError(f"rank {rank} cannot take a step: it is {self.describe(state)}")
            operation, barrier = state.operation, state.state == "barrier"
            shown = ({**operation, "kind": "host barrier", "label": "ctx.barrier", "targets": [], "before": None}
                     if barrier else operation)
            step = Step(len(self.transcript), rank, shown)
            releases = self._releases
            self.order.append(rank, operation, barrier)
            state.state, state.before, state.after = "running", None, None
            state.channel.send({"go": True})
        self.transcript.append(step)
        if not barrier and operation["kind"] != "load":
            self._wake_waiters(rank, operation)
        self.wait_until_held([rank], timeout)
        if barrier and self._releases != releases:
            # This step let the last rank into the barrier, and every rank out: wait until each is held again (or
            # has ended). Asking whether all are still in it raced with the first ones out (seen in CI: a replay
            # found a rank still "in a host barrier" one step later and called the order diverged).
            self._wait_for(lambda: all(s.settled and s.state != "in barrier" for s in self.ranks),
                           "to come out of the host barrier", timeout)
        if not barrier:
            step.before, step.after = state.before, state.after
        return step

    def step_each(self) -> list[Step]:
        """Every held rank takes one step, in rank order."""
        return [self.step(r) for r in range(self.world_size) if self.ranks[r].held]

    def run(self, rank: int, until_rank: int | None = None, until_line: int | None = None,
            max_steps: int = MAX_STEPS) -> int:
        """Step ``rank`` until it is held before an access to ``until_rank``'s heap or at line ``until_line`` (or
        until it cannot go on: its end, a barrier's wait); the number of steps taken.

        A rank waiting on a flag takes a step per poll: ``max_steps`` bounds a wait that nobody releases.
        """
        taken = 0
        while self.ranks[rank].held and taken < max_steps:
            if taken and self._reached(self.ranks[rank], until_rank, until_line):
                return taken
            self.step(rank)
            taken += 1
        if taken >= max_steps:
            raise SteppingError(f"rank {rank} took {max_steps} steps without reaching the point asked: "
                                f"{self.waiting_on(rank) or 'it keeps going'}")
        return taken

    def run_to_end(self, max_steps: int = MAX_STEPS) -> int:
        """Step every held rank in turn until all have ended; the number of steps taken."""
        taken = 0
        while not self.done:
            held = [r for r in range(self.world_size) if self.ranks[r].held]
            if not held:  # every rank that has not ended is in a host barrier: they come out of it together
                self._wait_for(lambda: self.done or any(s.held for s in self.ranks), "to come out of the host "
                               "barrier (a rank that never calls it keeps the others there)")
                continue
            for rank in held:
                if taken >= max_steps:
                    raise SteppingError(f"{max_steps} steps and the ranks have not ended: {self.summary()}")
                self.step(rank)
                taken += 1
        return taken

    def run_to_operation(self, label: str | None = None, max_steps: int = MAX_STEPS) -> int:
        """Step every held rank in turn until each is held in a named operation whose label holds ``label`` (a
        training step's ``"DDP bucket 1"``; :mod:`iris.instruments.operations`), or, without ``label``, in the next
        named operation after the one it is in now; or until it has ended. The number of steps taken. A rank that got
        there waits while the others catch up: the ranks of a collective arrive together.

        Raises
        ------
        SteppingError
            After ``max_steps`` steps short of it (a rank that polls a flag only a waiting rank would set).

        Examples
        --------
        >>> coordinator.run_to_operation("DDP bucket 1")            # doctest: +SKIP
        23
        """
        now = {s.rank: (s.operation or {}).get("within_number") for s in self.ranks}

        def arrived(state: RankState) -> bool:
            op = state.operation or {}
            if state.state != "paused" or "within" not in op:
                return False
            return label in op["within"] if label is not None else op.get("within_number") != now[state.rank]

        taken = 0
        while True:
            going = [r for r in range(self.world_size) if self.ranks[r].held and not arrived(self.ranks[r])]
            if not going:
                if self.done or any(s.held for s in self.ranks) or not any(s.state == "in barrier"
                                                                           for s in self.ranks):
                    return taken
                self._wait_for(lambda: self.done or any(s.held for s in self.ranks), "to come out of the host "
                               "barrier (a rank that never calls it keeps the others there)")
                continue
            for rank in going:
                if taken >= max_steps:
                    raise SteppingError(f"{max_steps} steps and the ranks are not all in an operation named "
                                        f"{label!r}: {self.summary()}")
                self.step(rank)
                taken += 1

    def run_first(self, ranks, until=None, before=None, max_steps: int = MAX_STEPS) -> int:
        """Step the ranks, always the first of ``ranks`` that can go (then the others, in rank order), to their end
        or until ``until(step)`` is true of a step taken, or until ``before(rank, operation)`` is true of the step
        about to be taken (the rank stays held before it). A rank waiting on a value that no step has changed since
        gives way until one does. Returns the number of steps taken; they are recorded as any steps are, so the
        run can be saved and replayed exactly (:mod:`.race_replay` makes a race happen this way)."""
        preference = list(dict.fromkeys([*ranks, *range(self.world_size)]))
        taken = 0
        while not self.done:
            held = [r for r in preference if self.ranks[r].held]
            if not held:
                self._wait_for(lambda: self.done or any(s.held for s in self.ranks), "to come out of the host "
                               "barrier (a rank that never calls it keeps the others there)")
                continue
            if taken >= max_steps:
                raise SteppingError(f"{max_steps} steps and the ranks have not ended: {self.summary()}")
            going = [r for r in held if self.ranks[r].polls < WAITING_POLLS] or held
            if before is not None and before(going[0], self.ranks[going[0]].operation):
                break
            step = self.step(going[0])
            taken += 1
            if until is not None and until(step):
                break
        return taken

    def replay(self, order: Order, *, strict: bool = True) -> None:
        """Take the steps of ``order``, in its order; raise :class:`OrderDiverged` at the first step that no longer
        fits (its rank is not held, or, with ``strict``, is held at another operation than the recorded one). An order
        replayed after steps were taken starts in the middle of the run: its divergence says so (a saved order starts
        at a run's first step)."""
        taken = len(self.order)
        for index, entry in enumerate(order.entries):
            state = self.ranks[entry.rank]
            if not state.held:
                raise OrderDiverged(index, entry, f"rank {entry.rank} is {self.describe(state)}", taken)
            found = self.order.signature(state.operation, state.state == "barrier")
            if strict and entry.signature is not None and entry.signature != found:
                raise OrderDiverged(index, entry, f"rank {entry.rank} is held before {found}", taken)
            self.step(entry.rank)

    def _wake_waiters(self, writer: int, operation: dict) -> None:
        """A write to an allocation that other ranks keep polling: they no longer wait on the same values."""
        written = {(t["rank"], t.get("allocation")) for t in operation["targets"]}
        for state in self.ranks:
            if state.rank != writer and state.polls and state.operation and any(
                    (t["rank"], t.get("allocation")) in written for t in state.operation["targets"]):
                state.polls = 0

    def stop(self, reason: str = "stopped by the user") -> None:
        """End the run: every rank still held or running gets ``stop`` (its kernel raises SteppingStopped)."""
        with self._changed:
            for state in self.ranks:
                if state.channel is not None and not state.ended:
                    try:
                        state.channel.send({"stop": reason})
                    except OSError:
                        pass

    # -- looking --------------------------------------------------------------------------------------------
    def read(self, heap_rank: int, offset: int, nbytes: int, timeout: float = 10.0) -> bytes:
        """``nbytes`` of ``heap_rank``'s heap at ``offset``, now (asked of a rank that is still connected)."""
        for state in self.ranks:
            if state.channel is None or state.ended:
                continue
            ident = next(self._ids)
            with self._changed:
                state.channel.send({"read": {"rank": heap_rank, "offset": offset, "nbytes": nbytes, "id": ident}})
                deadline = time.monotonic() + timeout
                while ident not in self._replies and time.monotonic() < deadline and not state.ended:
                    self._changed.wait(0.1)
                data = self._replies.pop(ident, None)
            if data is not None:
                return data
        raise SteppingError("no rank is connected any more to read the heaps from: the stepped cell has ended")

    def waiting_on(self, rank: int) -> str | None:
        """For a rank that keeps reading the same values (a flag wait): what it waits for and who could release
        it (held ranks whose next access writes there); None for a rank that is not waiting."""
        state = self.ranks[rank]
        if state.polls < WAITING_POLLS or state.operation is None:
            return None
        target = state.operation["targets"][0]
        what = element_phrase(target)
        writers = [other.rank for other in self.ranks if other.rank != rank and other.held and other.operation
                   and other.operation["kind"] != "load"
                   and any(t["rank"] == target["rank"] and t.get("allocation") == target.get("allocation")
                           for t in other.operation["targets"])]
        who = (f"rank{'s' * (len(writers) > 1)} {', '.join(map(str, writers))} next write{'s' * (len(writers) == 1)}"
               f" there" if writers else "no held rank's next step writes there")
        return (f"rank {rank} waits on {what} (read {state.polls} times, still {state.operation['before']}): "
                f"{who}")

    def summary(self) -> str:
        return "; ".join(f"rank {s.rank} {self.describe(s)}" for s in self.ranks)

    def describe(self, state: RankState) -> str:
        """Where ``state``'s rank is, in words: ``held before iris.store at line 9 (store)``."""
        if state.state == "paused":
            op = state.operation
            within = f" in {op['within']}" if op.get("within") else ""
            return f"held before {op['label']} at line {op['line']} ({op['kind']}){within}"
        if state.state == "barrier":
            return f"held before a host barrier at line {state.operation['line']}"
        if state.state == "failed":
            return f"failed: {state.error}"
        return {"in barrier": "in a host barrier, waiting for the other ranks", "finished": "at the end of its cell",
                "gone": "gone (its connection closed)", "running": "running to its next heap access",
                "connecting": "not connected yet"}[state.state]

    @staticmethod
    def _reached(state: RankState, until_rank, until_line) -> bool:
        op = state.operation or {}
        if until_line is not None and op.get("line") == until_line:
            return True
        return until_rank is not None and any(t["rank"] == until_rank for t in op.get("targets", []))

    # -- the connections ----------------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._listen, args=(Channel(sock),), daemon=True).start()

    def _listen(self, channel: Channel) -> None:
        state = None
        while True:
            message = channel.receive()
            with self._changed:
                if message is None:
                    if state is not None and not state.ended:
                        state.state = "gone"
                    self._changed.notify_all()
                    return
                if "hello" in message:
                    claimed = self.ranks[message["hello"]["rank"]]
                    if claimed.channel is not None:  # a second gate for one rank: never this run's, let it go
                        channel.send({"stop": f"rank {claimed.rank} is already in this stepped run"})
                        channel.close()
                        return
                    state = claimed
                    state.channel, state.pid = channel, message["hello"]["pid"]
                elif "bytes" in message:
                    self._replies[message["id"]] = base64.b64decode(message["bytes"])
                else:
                    self._update(state, message)
                self._changed.notify_all()

    def _update(self, state: RankState, message: dict) -> None:
        if "paused" in message:
            operation = message["paused"]
            previous = state.operation
            same = (previous is not None and state.state == "running" and previous.get("line") == operation["line"]
                    and previous.get("kind") == operation["kind"] and previous.get("before") == operation["before"]
                    and previous.get("targets") == operation["targets"])
            state.polls = state.polls + 1 if same else 0
            state.state, state.operation = "paused", operation
        elif "done" in message:
            state.before, state.after = message["done"]["before"], message["done"]["after"]
        elif "barrier" in message:
            state.state, state.operation, state.polls = "barrier", message["barrier"], 0
        elif "entered" in message:
            state.state = "in barrier"
            inside = [s for s in self.ranks if not s.ended]
            if all(s.state == "in barrier" for s in inside):  # the last one in: every rank goes into the real one
                self._releases += 1
                for other in inside:
                    other.channel.send({"released": True})
        elif "finished" in message:
            state.state, state.steps = "finished", message["finished"]["steps"]
        elif "failed" in message:
            state.state, state.error = "failed", message["failed"]["error"]
            state.steps = message["failed"]["steps"]

    def close(self) -> None:
        """Stop the run if it still goes, stop listening, and remove the socket's folder."""
        if not self.done:
            self.stop("the coordinator closed")
        self._closed = True
        self._listener.close()
        for state in self.ranks:
            if state.channel is not None:
                state.channel.close()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
        elif os.path.exists(self.address):
            os.unlink(self.address)

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
