"""Byte sizes written the way people write them: ``"64MiB"``, ``"1 GiB"``, ``"512k"``, ``1 << 20``.

The one place in the project that parses a size; the workbench's ``--heap`` option uses it too.

Examples
--------
>>> parse_size("64MiB")
67108864
>>> parse_size(4096)
4096
>>> format_size(3 << 20)
'3.0 MiB'
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1000, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1000**4, "tib": 1 << 40,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(size: int | str) -> int:
    """Return ``size`` in bytes; ints pass through, strings take an optional unit (KiB, MiB, GiB, MB...).

    Raises ``ValueError`` with the accepted spellings for anything else.
    """
    if isinstance(size, bool):
        raise ValueError(f"size must be a number of bytes or a string like '64MiB', not {size!r}")
    if isinstance(size, int):
        if size <= 0:
            raise ValueError(f"size must be positive, got {size}")
        return size
    match = _PATTERN.match(str(size))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"cannot read {size!r} as a size: write a number of bytes or a number with a unit, "
            "e.g. '64MiB', '1GiB', '512KiB', '100MB'"
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"size must be positive, got {size!r}")
    return value


def format_size(nbytes: int) -> str:
    """Human-readable binary size, e.g. ``'3.0 MiB'``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
