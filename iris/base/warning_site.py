"""Notes said once per process, pointing at the user's line (past the frames of iris and of the libraries it
adapts).

A note raised deep inside iris (or inside Triton's launch and compile path, which iris wraps) is only useful
if it names the line the user wrote; how many frames lie between differs by call path and by Triton release,
so the ``stacklevel`` is counted, not fixed.

Examples
--------
>>> def note_once():
...     warn_once("example-note", "said once per process", UserWarning, "iris")
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import warnings

_STDLIB = os.path.join(os.path.realpath(sysconfig.get_paths()["stdlib"]), "")
_SITE = tuple(os.path.join(os.path.realpath(sysconfig.get_paths()[key]), "") for key in ("purelib", "platlib"))


def _skipped(frame, packages) -> bool:
    # The standard library too: Triton's code generator walks the kernel with ast.NodeVisitor, whose frames
    # lie between a compile and the layout it builds.
    path = os.path.realpath(frame.f_code.co_filename)
    return (frame.f_globals.get("__name__", "").partition(".")[0] in packages
            or (path.startswith(_STDLIB) and not path.startswith(_SITE)))


_said: set[str] = set()  # the keys of the notes warn_once has said in this process
_said_lock = threading.Lock()  # kernels launch from several threads (Triton 3.9 compiles in a pool)


def warn_once(key: str, message: str, category: type[Warning], *packages: str) -> None:
    """``warnings.warn`` the first time ``key`` comes in this process, pointing past ``packages``' frames.

    A key counts as said only once the warning went out: under ``-W error`` the warning raises, and the next
    occurrence raises again.

    Parameters
    ----------
    key : str
        What is said once, e.g. ``"launch option waves_per_eu"``.
    message : str
    category : type of Warning
    *packages : str
        Top-level packages whose frames the warning points past, e.g. ``"iris", "triton"`` (the standard
        library's are passed too).
    """
    with _said_lock:  # marked first and said outside the lock: a showwarning hook may come back here
        if key in _said:
            return
        _said.add(key)
    try:
        warnings.warn(message, category, stacklevel=_level_outside(sys._getframe(1), packages) + 1)
    except BaseException:
        with _said_lock:
            _said.discard(key)
        raise


def _level_outside(frame, packages) -> int:
    """How far out from ``frame`` (counted as 1) the first frame outside ``packages`` and the standard library is."""
    level = 1
    while frame is not None and _skipped(frame, packages):
        frame, level = frame.f_back, level + 1
    return level
