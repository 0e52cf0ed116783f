"""Sweep axes of a benchmark: how they are declared, written on the command line, filtered and combined.

A benchmark's axes are a list of :class:`AxisDef`; the points it runs at are the Cartesian product of their
values, the first axis varying slowest. ``--axis_<name>=`` replaces an axis's values, ``--skip_<name>=`` drops
some of them; both take the forms :func:`parse_axis_values` reads.

Examples
--------
>>> power_of_two(3, 5)
[8, 16, 32]
>>> linear_range(64, 256, 64)
[64, 128, 192, 256]
>>> parse_axis_values("pow2:8:10", "M")
[256, 512, 1024]
>>> [dict(point) for point in axis_points([AxisDef("M", [1, 2]), AxisDef("N", [8])])]
[{'M': 1, 'N': 8}, {'M': 2, 'N': 8}]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

NUM_RANKS = "num_ranks"  # the axis that says how many processes a worker group has, not a loop inside one

# The dtype spellings the command line accepts, and the names output uses for dtypes.
DTYPE_NAMES = {
    "fp16": torch.float16, "float16": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp32": torch.float32, "float32": torch.float32,
}


@dataclass
class AxisDef:
    """One sweep axis: its name (read in the benchmark as ``state[name]``) and its values, in order."""

    name: str
    values: list[Any]


def power_of_two(start_exp: int, end_exp: int) -> list[int]:
    """Powers of two from ``2**start_exp`` to ``2**end_exp``, both included.

    Examples
    --------
    >>> power_of_two(0, 2)
    [1, 2, 4]
    """
    return [2**exponent for exponent in range(start_exp, end_exp + 1)]


def linear_range(start: int, end: int, step: int) -> list[int]:
    """``start``, ``start + step``, ... up to ``end``, ``end`` included when the steps land on it.

    Examples
    --------
    >>> linear_range(1, 7, 3)
    [1, 4, 7]
    """
    return list(range(start, end + 1, step))


def axis(name: str, values) -> Callable:
    """Decorator: sweep the benchmark over ``values`` of ``name``; stacked axes give their Cartesian product.

    The outermost ``@axis`` (the first written) varies slowest, as rows of the output table. The axis named
    ``num_ranks`` sets how many ranks run the benchmark: one worker group is started per value.

    Examples
    --------
    >>> @axis("M", [1024, 2048])
    ... @axis("N", [64])
    ... def gemm(state, ctx): ...
    >>> [a.name for a in gemm._bench_axes]
    ['M', 'N']
    """

    def declare(fn: Callable) -> Callable:
        # Decorators apply bottom-up: putting each new (outer) axis first keeps the written order.
        fn._bench_axes = [AxisDef(name, list(values)), *getattr(fn, "_bench_axes", [])]
        return fn

    return declare


def dtype_name(value: Any) -> str:
    """How output writes an axis value: dtypes by their torch name (``float16``), anything else by ``str``.

    Examples
    --------
    >>> dtype_name(torch.bfloat16), dtype_name(1024)
    ('bfloat16', '1024')
    """
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return str(value)


def parse_axis_values(text: str, axis_name: str) -> list[Any]:
    """The values a ``--axis_<name>=`` or ``--skip_<name>=`` flag gives.

    Forms: ``1024,2048`` (a list: ints, else floats, else strings; dtype names such as ``fp16`` or
    ``bfloat16`` become torch dtypes), ``pow2:START:END`` (:func:`power_of_two`), ``lin:START:END:STEP``
    (:func:`linear_range`). A ``dtype`` axis takes dtype names only.

    Examples
    --------
    >>> parse_axis_values("fp16,bf16", "dtype")
    [torch.float16, torch.bfloat16]
    >>> parse_axis_values("one_shot,two_shot", "variant")
    ['one_shot', 'two_shot']
    """
    text = text.strip()
    ranges = {"pow2": (power_of_two, "pow2:START:END"), "lin": (linear_range, "lin:START:END:STEP")}
    head, _, rest = text.partition(":")
    if head in ranges and ":" in text:
        make, form = ranges[head]
        try:
            numbers = [int(part) for part in rest.split(":")]
            return make(*numbers)
        except (ValueError, TypeError):
            raise ValueError(f"--axis_{axis_name}={text}: write the range as {form}, with integers") from None
    tokens = [token.strip() for token in text.split(",")]
    if any(not token for token in tokens):
        raise ValueError(f"--axis_{axis_name}={text}: an empty value; separate values with single commas")
    dtypes = [DTYPE_NAMES.get(token.lower()) for token in tokens]
    if axis_name == "dtype" and None in dtypes:
        unknown = [token for token, dtype in zip(tokens, dtypes, strict=False) if dtype is None]
        raise ValueError(f"--axis_dtype / --skip_dtype: unknown dtype {', '.join(unknown)}; "
                         f"use {', '.join(sorted(DTYPE_NAMES))}")
    if None not in dtypes:
        return dtypes
    for convert in (int, float):
        try:
            return [convert(token) for token in tokens]
        except ValueError:
            pass
    return tokens


def effective_values(axis_def: AxisDef, overrides: dict[str, list], skips: dict[str, list]) -> list[Any]:
    """The axis's values once ``--axis_`` overrides replaced them and ``--skip_`` filters dropped some."""
    values = overrides.get(axis_def.name, axis_def.values)
    dropped = skips.get(axis_def.name, [])
    return [value for value in values if value not in dropped]


def axis_points(axes: list[AxisDef]):
    """Every combination of the axes' values, as ``(name, value)`` pairs in axis order, first axis slowest."""
    names = [a.name for a in axes]
    for values in itertools.product(*(a.values for a in axes)):
        yield list(zip(names, values, strict=False))
