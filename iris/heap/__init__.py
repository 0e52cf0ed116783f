"""The heap layer: symmetric heaps, a collective allocator over per-rank memory, and who maps whose heap.

* :mod:`.symmetric`: :class:`SymmetricHeap`, what every rank allocates in step; :mod:`.allocator`: the offsets;
  :mod:`.chunks`: the chunk a chunked heap (``allocator_type="vmem_chunked"``) maps at a time;
* one module or package per backend, holding all of that backend's code: :mod:`.cpu` (a /dev/shm file per
  rank) and :mod:`iris.heap.cuda` (CUDA IPC, CUDA virtual memory, file-descriptor passing, GPU topology);
* :mod:`.topology`: who reaches whom (hosts, GPUs, links); :mod:`.reach`: which ranks' heaps this rank maps.

Imports only :mod:`iris.base` from the rest of iris. Which backend and allocator a context uses is chosen a layer
above (:mod:`iris.runtime.heap_choice`), never by the heap it creates.

Examples
--------
>>> from iris.heap import SymmetricHeap
>>> SymmetricHeap.__module__
'iris.heap.symmetric'
"""

from .allocator import Allocator, OutOfHeap, Usage
from .symmetric import AllocationDivergence, AllocationInfo, HeapLocation, SymmetricHeap

__all__ = ["Allocator", "AllocationDivergence", "AllocationInfo", "HeapLocation", "OutOfHeap", "SymmetricHeap", "Usage"]
