"""Where a warning points: at the user's line, past the frames of iris and of the libraries it adapts.

A note raised deep inside iris (or inside Triton's launch and compile path, which iris wraps) is only useful
if it names the line the user wrote; how many frames lie between differs by call path and by Triton release,
so the ``stacklevel`` is counted, not fixed.

Examples
--------
>>> import warnings
>>> def note():
...     warnings.warn("said once", UserWarning, stacklevel=stacklevel_outside("iris"))
"""

from __future__ import annotations

import os
import sys
import sysconfig

_STDLIB = os.path.join(os.path.realpath(sysconfig.get_paths()["stdlib"]), "")
_SITE = tuple(os.path.join(os.path.realpath(sysconfig.get_paths()[key]), "") for key in ("purelib", "platlib"))


def _skipped(frame, packages) -> bool:
    # The standard library too: Triton's code generator walks the kernel with ast.NodeVisitor, whose frames
    # lie between a compile and the layout it builds.
    path = os.path.realpath(frame.f_code.co_filename)
    return (frame.f_globals.get("__name__", "").partition(".")[0] in packages
            or (path.startswith(_STDLIB) and not path.startswith(_SITE)))


def stacklevel_outside(*packages: str) -> int:
    """The ``stacklevel`` that names the first frame outside ``packages`` and the standard library.

    For the caller's own ``warnings.warn``.

    Parameters
    ----------
    *packages : str
        Top-level package names whose frames are skipped, e.g. ``"iris", "triton"``.
    """
    frame, level = sys._getframe(1), 1  # the caller of this function, which calls warnings.warn: stacklevel 1
    while frame is not None and _skipped(frame, packages):
        frame, level = frame.f_back, level + 1
    return level
