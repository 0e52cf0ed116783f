"""Step through a distributed kernel on CPU ranks: every rank held before each access to a symmetric heap, the
ranks let go one step at a time in an order a person (or a script, or a race report) chooses.

* :mod:`.gate`: a rank's side, :func:`stepped` (an interpreter observer; refused on GPUs, which cannot pause);
* :mod:`.coordinator`: :class:`Coordinator`, which holds the ranks and steps them;
* :mod:`.order`: :class:`Order`, a run's steps, saved, edited and replayed (the same heaps, bit for bit);
* :mod:`.transcript`: :class:`Transcript`, the numbered table of steps with the values before and after;
* :mod:`.race_replay`: a race of the checker's made to happen (:func:`make_it_happen`, :func:`what_happened`), or
  held just before it (:func:`hold_before_race`);
* :mod:`.protocol`: what the two sides say.

The workbench drives it from a notebook (``%%iris_kernel --step``, :func:`workbench.step`); a script runs a
coordinator in one process and ``with stepped(ctx, address):`` in every rank.

Examples
--------
>>> coordinator = Coordinator(world_size=2)                      # doctest: +SKIP
>>> with stepped(ctx, coordinator.address):                      # on every rank  # doctest: +SKIP
...     kernel[(1,)](...)
"""

from .coordinator import Coordinator, RankState, SteppingError
from .gate import ON_A_GPU, Gate, stepped
from .order import Entry, Order, OrderDiverged
from .protocol import SteppingStopped
from .race_replay import hold_before_race, make_it_happen, race_order, what_happened
from .transcript import Step, Transcript, element_phrase

__all__ = ["ON_A_GPU", "Coordinator", "Entry", "Gate", "Order", "OrderDiverged", "RankState", "Step", "SteppingError",
           "SteppingStopped", "Transcript", "element_phrase", "hold_before_race", "make_it_happen", "race_order",
           "stepped", "what_happened"]
