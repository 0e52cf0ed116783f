"""The order of a stepped run: which rank took each step, kept to be saved, edited by hand and replayed.

An order is a list of entries, one per step: the rank, and what it was about to do (its signature: the operation's
kind, kernel and line, or ``host barrier`` and its line). Replaying an order takes the same steps in the same
interleaving, so the heaps come out the same, bit for bit; an entry whose signature no longer matches what its
rank is about to do (the kernel changed) stops the replay there, saying which step diverged. The file is JSON with
one entry per line, so a person can reorder, add or remove steps; an entry may be just a rank number (no check).

Examples
--------
>>> order = Order.parse([0, 0, 1, {"rank": 1, "signature": "load cell line 9"}])
>>> [entry.rank for entry in order.entries]
[0, 0, 1, 1]
>>> print(order.text().splitlines()[0])
{"order": "iris stepped run", "version": 1, "steps": [
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    """One step of an order: ``rank``, and its ``signature`` (None: any step of that rank)."""

    rank: int
    signature: str | None = None


class OrderDiverged(RuntimeError):
    """A replayed order no longer fits the run: step ``index`` expected ``entry`` and found something else.

    The likely cause it names: with ``taken`` steps taken before the replay began, the replay started in the middle
    of the run, while a saved order starts at a run's first step; with none, the code changed since the order was
    recorded.

    Examples
    --------
    >>> print(OrderDiverged(1, Entry(1, "load consume line 9"), "rank 1 is held before atomic_cas consume line 14",
    ...                     taken=3))   # doctest: +ELLIPSIS
    the order diverged at its step 1 (step 4 of this run): ... the replay began in the middle of the run, after 3 ...
    """

    def __init__(self, index: int, entry: Entry, found: str, taken: int = 0):
        self.index, self.entry, self.found, self.taken = index, entry, found, taken
        wanted = f"rank {entry.rank}" + (f" before {entry.signature}" if entry.signature else "")
        if taken:
            where = f"its step {index} (step {taken + index} of this run)"
            cause = (f"likely cause: the replay began in the middle of the run, after {taken} step"
                     f"{'s' * (taken != 1)} already taken, and a saved order starts at a run's first step. Replay it "
                     "on a fresh run (workbench.step(code, order=FILE), or %%iris_kernel --step --replay FILE), or "
                     "keep only the steps that follow")
        else:
            where = f"step {index}"
            cause = ("has the kernel changed since the order was recorded? record a new one, or edit the order")
        super().__init__(f"the order diverged at {where}: it expects {wanted}, but {found} ({cause})")


class Order:
    """The steps of a run, in the order they were taken (see the module docstring)."""

    def __init__(self, entries: list[Entry] | None = None):
        self.entries: list[Entry] = list(entries or [])

    def __len__(self) -> int:
        return len(self.entries)

    def __eq__(self, other) -> bool:
        return isinstance(other, Order) and self.entries == other.entries

    @staticmethod
    def signature(operation: dict | None, barrier: bool = False) -> str | None:
        """What a held rank is about to do, as an order entry says it: ``atomic_cas flag_kernel line 12``."""
        if operation is None:
            return None
        if barrier:
            return f"host barrier line {operation['line']}"
        return f"{operation['kind']} {operation['kernel']} line {operation['line']}"

    def append(self, rank: int, operation: dict | None, barrier: bool = False) -> None:
        self.entries.append(Entry(rank, self.signature(operation, barrier)))

    @property
    def ranks(self) -> list[int]:
        return [entry.rank for entry in self.entries]

    @classmethod
    def parse(cls, steps) -> Order:
        """An order from a list of ranks and ``{"rank", "signature"}`` entries (as saved, or written by hand)."""
        entries = []
        for index, step in enumerate(steps):
            if isinstance(step, int) and not isinstance(step, bool):
                entries.append(Entry(step))
            elif isinstance(step, dict) and isinstance(step.get("rank"), int):
                entries.append(Entry(step["rank"], step.get("signature")))
            else:
                raise ValueError(f"step {index} of the order is {step!r}: write a rank number, or "
                                 '{"rank": 0, "signature": "..."}')
        return cls(entries)

    def text(self) -> str:
        """The order as saved: JSON, one step per line."""
        lines = [json.dumps({"rank": e.rank, "signature": e.signature}) for e in self.entries]
        return ('{"order": "iris stepped run", "version": 1, "steps": [\n' + ",\n".join(lines) + "\n]}\n")

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(self.text())
        return path

    @classmethod
    def load(cls, path) -> Order:
        """The order saved at ``path`` (a ValueError naming the file when it is not one)."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not a saved order ({err})") from None
        if not isinstance(data, dict) or "steps" not in data:
            raise ValueError(f"{path} is not a saved order: it has no 'steps'")
        return cls.parse(data["steps"])
