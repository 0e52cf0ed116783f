"""Symmetric heaps: a collective allocator over per-rank memory, on the CPU (/dev/shm) or on CUDA GPUs."""

from .allocator import Allocator, OutOfHeap, Usage
from .symmetric import AllocationDivergence, AllocationInfo, SymmetricHeap

__all__ = ["Allocator", "AllocationDivergence", "AllocationInfo", "OutOfHeap", "SymmetricHeap", "Usage"]
