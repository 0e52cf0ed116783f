"""Symmetric heaps: a collective allocator over per-rank memory, on the CPU (/dev/shm) or on CUDA GPUs."""

from .allocator import Allocator, OutOfHeap, Usage
from .symmetric import AllocationDivergence, AllocationInfo, HeapLocation, SymmetricHeap

__all__ = ["Allocator", "AllocationDivergence", "AllocationInfo", "HeapLocation", "OutOfHeap", "SymmetricHeap", "Usage"]
