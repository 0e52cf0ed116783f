"""The register layouts of the Gluon collectives (``Config(use_gluon=True)``), chosen on the host.

Why explicit layouts: a Gluon kernel says which thread holds which elements, where Triton decides for itself.
The collectives move contiguous memory, so every thread gets 16 contiguous bytes per access (the widest
global load and store a GPU thread issues, ``ld.global.v4.b32``), a warp covers 512 contiguous bytes, and the
warps of a program follow one another. Whether the 16 bytes are really moved as one access also depends on
alignment, which the kernels state where they know it (``HINT``, ``WIDE``), as the Triton kernels do.

The warp width is the GPU's (32 threads on NVIDIA, read from Triton's target); the CPU interpreter ignores
layouts, and gets NVIDIA's so that it runs the very layouts a GPU compiles.

Examples
--------
>>> flat_layout(2, 4096, 8, 32)    # bf16, 4096 elements per step, 8 warps of 32 threads   # doctest: +ELLIPSIS
BlockedLayout(size_per_thread=[8], threads_per_warp=[32], warps_per_cta=[8], order=[0], ...)
>>> tile_layout(4, 32, 64, 8, 32)  # fp32 tiles of 32 x 64: 4 per thread, 16 along a row  # doctest: +ELLIPSIS
BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[2, 16], warps_per_cta=[8, 1], order=[1, 0], ...)
"""

from __future__ import annotations

from triton.experimental.gluon import language as gl

ACCESS_BYTES = 16  # the widest global access of one GPU thread
NVIDIA_WARP = 32


def warp_threads(ctx) -> int:
    """Threads per warp of ``ctx``'s device: Triton's target on a GPU; NVIDIA's 32 on the CPU interpreter."""
    if ctx.get_device().type != "cuda":
        return NVIDIA_WARP
    from triton.runtime.driver import driver  # a GPU driver exists only on the CUDA backend

    return driver.active.get_current_target().warp_size


def per_thread(element_bytes: int, elements: int) -> int:
    """Contiguous elements per thread: 16 bytes' worth, fewer when ``elements`` (a power of two) is smaller."""
    return max(1, min(ACCESS_BYTES // element_bytes, elements))


def flat_layout(element_bytes: int, block: int, num_warps: int, threads: int) -> gl.BlockedLayout:
    """1-D layout of a block of ``block`` contiguous elements: 16 bytes per thread and access.

    A block smaller than one pass of every thread (``vector * threads * num_warps`` elements) gets fewer
    elements per thread, down to one; below that, threads repeat elements (Gluon's rule for a layout larger
    than its tensor), which costs nothing but idle threads.
    """
    vector = per_thread(element_bytes, max(1, block // (threads * num_warps)))
    return gl.BlockedLayout([vector], [threads], [num_warps], [0])


def tile_layout(element_bytes: int, block_m: int, block_n: int, num_warps: int, threads: int) -> gl.BlockedLayout:
    """2-D layout of a ``block_m x block_n`` tile of row-major rows: each thread 16 contiguous bytes of a row,
    the threads of a warp along the row first (as many as the row needs), then down the rows; warps stacked
    down the rows."""
    vector = per_thread(element_bytes, block_n)
    along_row = min(threads, block_n // vector)
    return gl.BlockedLayout([1, vector], [threads // along_row, along_row], [num_warps, 1], [1, 0])
