"""Engine side of the widgets: shrink a tensor to what a picture can show, before it leaves the rank.

A 16M-element tensor is 64 MB; a heatmap a few hundred pixels wide needs ~1/250 of that. Each rank cuts
the tensor (or, above two dimensions, one 2-D slice of it) into blocks, at most ``max_side`` per side, and
sends back per block the mean, min and max: the view draws the mean (smooth fields) or the signed value of
largest magnitude (sparse spikes), and the three together fingerprint the block for diff mode.

Diff mode compares with the previous snapshot a view took: the engine keeps it (per view token, a few
hundred kB each, for the last 32 views), so only a change mask travels. A change that keeps a block's
mean, min and max (two values swapped inside one block) goes unseen; blocks of one element, as in tensors
that need no reduction, are compared exactly.

Examples
--------
>>> import torch
>>> r = reduce_blocks(torch.arange(12.0).reshape(3, 4), max_side=2)
>>> r["block"], r["mean"].tolist(), r["max"].tolist()
((2, 2), [[2.5, 4.5], [8.5, 10.5]], [[5.0, 7.0], [9.0, 11.0]])
"""

from __future__ import annotations

import math
from collections import OrderedDict

# Tensors up to this many elements get their values sent whole, for the values table.
SMALL_TENSOR = 64
# Previous snapshots kept per engine (views that were closed never say so; the oldest are dropped).
KEPT_SNAPSHOTS = 32

_previous: OrderedDict = OrderedDict()


def _displayable(t):
    """A float tensor holding ``t``'s values: floats as they are (half types widened), the rest as float64."""
    import torch

    t = t.detach()
    if t.is_complex():
        t = t.abs()  # the view says "|x|" for complex tensors
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.float()
    return t if t.is_floating_point() else t.to(torch.float64)


def plane_of(t, index: int):
    """The 2-D (or 1-D) part of ``t`` a view draws: ``t`` itself up to 2-D, else slice ``index`` of the
    leading dimensions taken together (``t.flatten(0, -3)[index]``, without copying)."""
    if t.dim() == 0:
        return t.reshape(1)
    if t.dim() <= 2:
        return t
    leading = t.shape[:-2]
    count = math.prod(leading)
    if not 0 <= index < count:
        raise IndexError(f"slice {index} does not exist: {tuple(t.shape)} has {count} slices of {tuple(t.shape[-2:])}")
    position = []
    for size in reversed(leading):
        index, rest = divmod(index, size)
        position.append(rest)
    return t[tuple(reversed(position))]


def block_size(n: int, max_side: int) -> int:
    """Elements per block along a dimension of ``n`` so that at most ``max_side`` blocks remain."""
    return max(1, math.ceil(n / max_side))


def _reduce_dim(x, dim: int, b: int, op):
    """Blocks of ``b`` along ``dim`` reduced with ``op(tensor, dim)``; the last block may be shorter."""
    import torch

    n = x.shape[dim]
    if b == 1:
        return x
    whole = n // b * b
    parts = [op(x.narrow(dim, 0, whole).unflatten(dim, (n // b, b)), dim + 1)] if whole else []
    if whole < n:
        parts.append(op(x.narrow(dim, whole, n - whole), dim).unsqueeze(dim))
    return torch.cat(parts, dim)


def _block_counts(n: int, b: int):
    import torch

    sizes = [b] * (n // b) + ([n % b] if n % b else [])
    return torch.tensor(sizes, dtype=torch.float64)


def reduce_blocks(plane, max_side: int) -> dict:
    """Per block of ``plane`` (1-D or 2-D): ``mean``, ``min``, ``max`` as float32 numpy arrays, the ``block``
shape, and the plane's ``stats`` (min, max, mean).

    Separable reductions (sum, min, max along one dimension, then the other) give exactly the block values.
    Sums stay in the tensor's dtype: summing in float64 from the start takes ten times longer on a CPU, and
    float32 block sums are exact enough to draw and to notice a change.
    """
    import torch

    x = _displayable(plane)
    blocks = tuple(block_size(n, max_side) for n in x.shape)
    sums, lows, highs = x, x, x
    for dim, b in enumerate(blocks):
        sums = _reduce_dim(sums, dim, b, lambda t, d: t.sum(d))
        lows = _reduce_dim(lows, dim, b, lambda t, d: t.amin(d))
        highs = _reduce_dim(highs, dim, b, lambda t, d: t.amax(d))
    counts = _block_counts(x.shape[0], blocks[0])
    if x.dim() == 2:
        counts = counts[:, None] * _block_counts(x.shape[1], blocks[1])[None, :]
    sums = sums.to(torch.float64).cpu()  # reduced on the tensor's device; the few block values come home
    as_numpy = lambda t: t.to(torch.float32).cpu().numpy()
    stats = {"min": float(lows.min()), "max": float(highs.max()), "mean": float(sums.sum() / x.numel())}
    return {"mean": as_numpy(sums / counts), "min": as_numpy(lows), "max": as_numpy(highs), "block": blocks,
            "stats": stats}


def changed(previous: dict, current: dict, keys=("mean", "min", "max")):
    """Bool mask of the entries where any of ``keys`` differ between two snapshots (NaN equal to NaN)."""
    import numpy as np

    mask = np.zeros(current[keys[0]].shape, dtype=bool)
    for key in keys:
        a, b = previous[key], current[key]
        mask |= ~((a == b) | (np.isnan(a) & np.isnan(b)))
    return mask


def _remember(token: str | None, signature: tuple, reduced: dict) -> dict | None:
    """Keep ``reduced`` as view ``token``'s snapshot; return the previous one if it has the same
    ``signature`` (shape, dtype, slice, block limit), else None: a first look, or nothing to compare."""
    if token is None:
        return None
    before = _previous.pop(token, None)
    _previous[token] = (signature, reduced)
    while len(_previous) > KEPT_SNAPSHOTS:
        _previous.popitem(last=False)
    return before[1] if before is not None and before[0] == signature else None


def describe(t, plane) -> dict:
    """Shape, dtype and the plane's shape, as the view's header shows them."""
    return {"shape": tuple(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "complex": t.is_complex(),
            "plane_shape": tuple(plane.shape), "slices": math.prod(t.shape[:-2]) if t.dim() > 2 else 1}


def summarize_tensor(t, token: str | None, max_side: int, index: int) -> dict:
    """Reduce ``t`` (its slice ``index`` above 2-D) for a view: description, blocks and stats; the values
    themselves (``values``, flattened) when there are at most :data:`SMALL_TENSOR`; and, against view
    ``token``'s previous snapshot, the masks ``changed`` (blocks) and ``values_changed`` (elements), None
    when there is no previous snapshot of the same shape and slice."""
    import numpy as np

    plane = plane_of(t, index)
    info = describe(t, plane)
    reduced = reduce_blocks(plane, max_side)
    if t.numel() <= SMALL_TENSOR:
        reduced["values"] = _displayable(t).flatten().cpu().numpy().astype(np.float64)
    before = _remember(token, (info["shape"], info["dtype"], index, max_side), reduced)
    info.update(reduced, changed=None, values_changed=None)
    if before is not None:
        info["changed"] = changed(before, reduced)
        if "values" in reduced:
            info["values_changed"] = changed(before, reduced, keys=("values",))
    return info
