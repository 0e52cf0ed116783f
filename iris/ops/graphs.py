"""Eager calls at graph speed: a call repeated with the same tensors replays a CUDA graph of itself.

Why: an op's chunked path queues 20 to 60 operations on two streams (GEMM pieces, copies, flags, events),
and from Python each costs 10 to 40 µs of host time. Measured on 2xH200 before this module: 300 to 1500 µs
of host time per call, e.g. 620 µs to queue the 250 µs of GPU work of a chunked matmul_all_reduce at
M = 2048, so a loop of eager calls waited on the host. Replaying a captured graph costs one launch.

So the first call with a key (the tensors' addresses, shapes, strides and dtypes, and how the op runs) runs
directly: it may allocate its workspace, which is collective and cannot be captured. The second captures
the call into a CUDA graph and replays it; later ones replay it. Because the key holds the addresses, the
graph reads and writes the same tensors as a direct call would. Calls made while the caller captures a
graph of its own, and calls on the CPU backend, always run directly.

A graph also holds the addresses of the workspace's own state (its flags, its collective's workspace): a
direct call that replaces that state (``state`` changes across it) drops every graph of the workspace.

Examples
--------
>>> graphs = CallGraphs()
>>> graphs.run(("key",), lambda: None, cuda=False)      # not on a GPU: called directly
"""

from __future__ import annotations

from collections import OrderedDict

import torch

MAX_GRAPHS = 8  # graphs kept per workspace, the least recently replayed dropped first
MAX_CAPTURES = 4 * MAX_GRAPHS  # then a workspace whose calls keep changing tensors stops capturing
MAX_SEEN = 256  # keys remembered as seen once, the oldest forgotten first


def call_key(tensors, *choices) -> tuple:
    """What identifies a call: each tensor's address, shape, strides and dtype (None stays None), and
    ``choices`` (path, pieces, async_op...)."""
    layout = tuple(None if t is None else (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) for t in tensors)
    return layout, choices


class CallGraphs:
    """The CUDA graphs of one workspace's repeated calls, by :func:`call_key`.

    Attributes
    ----------
    replays : int
        Calls that replayed a graph (read by tests and benchmarks, so the path taken is visible).
    captures : int
        Graphs captured so far.
    """

    def __init__(self):
        self.graphs: OrderedDict = OrderedDict()
        self.seen: OrderedDict = OrderedDict()
        self.replays = self.captures = 0

    def run(self, key: tuple, call, cuda: bool, state=tuple) -> None:
        """``call()``, or the replay of its graph (see the module's docstring); ``state()`` fingerprints the
        workspace state a graph holds the addresses of."""
        if not cuda or torch.cuda.is_current_stream_capturing():
            self._direct(call, state)
            return
        graph = self.graphs.get(key)
        if graph is None:
            if key not in self.seen or self.captures >= MAX_CAPTURES:
                self.seen[key] = None
                if len(self.seen) > MAX_SEEN:
                    self.seen.popitem(last=False)
                self._direct(call, state)
                return
            graph = self._capture(call)
            if len(self.graphs) >= MAX_GRAPHS:
                self.graphs.popitem(last=False)
            self.graphs[key] = graph
        self.graphs.move_to_end(key)
        graph.replay()
        self.replays += 1

    def forget(self) -> None:
        """Drop every graph (the state they point at was replaced)."""
        self.graphs.clear()
        self.seen.clear()

    def _direct(self, call, state) -> None:
        before = state()
        call()
        if state() != before:
            self.forget()

    def _capture(self, call) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: other threads of the process (a notebook engine's helpers) may use CUDA meanwhile.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                call()
        except Exception:
            self.captures = MAX_CAPTURES  # the call did not run; this workspace's calls run directly from now on
            raise
        self.captures += 1
        return graph
