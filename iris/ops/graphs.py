"""Eager calls at graph speed: a call repeated with the same tensors replays a CUDA graph of itself.

Why: an op's chunked path queues 20 to 60 operations on two streams (GEMM pieces, copies, flags, events),
and from Python each costs 10 to 40 µs of host time: on 2xH200 a chunked matmul_all_reduce at M = 2048
took 620 µs of host time to queue 250 µs of GPU work (benchmarks/RESULTS.md "fused_ops"), so a loop of eager
calls waited on the host. Replaying a captured graph costs one launch.

So the first call with a key (the tensors' addresses, shapes, strides and dtypes, and how the op runs) runs
directly: it may allocate its workspace, which is collective and cannot be captured. The second captures
the call into a CUDA graph and replays it; later ones replay it. Because the key holds the addresses, the
graph reads and writes the same tensors as a direct call would. Calls made while the caller captures a
graph of its own, and calls on the CPU backend, always run directly.

Examples
--------
>>> graphs = CallGraphs()
>>> graphs.run(("key",), lambda: None, cuda=False)      # not on a GPU: called directly
"""

from __future__ import annotations

import torch

MAX_GRAPHS = 8  # graphs per workspace: a loop over many buffers must not grow memory without bound


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
    """

    def __init__(self):
        self.graphs: dict = {}
        self.seen: set = set()
        self.replays = 0

    def run(self, key: tuple, call, cuda: bool) -> None:
        """``call()``, or the replay of its graph (see the module's docstring)."""
        if not cuda or torch.cuda.is_current_stream_capturing():
            call()
            return
        graph = self.graphs.get(key)
        if graph is None:
            if key not in self.seen:
                self.seen.add(key)
                call()
                return
            if len(self.graphs) >= MAX_GRAPHS:
                self.graphs.pop(next(iter(self.graphs)))  # the oldest
            graph = self.graphs[key] = torch.cuda.CUDAGraph()
            # thread_local: the workbench's helper threads may touch CUDA meanwhile; they are not captured.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                call()
        graph.replay()
        self.replays += 1
