"""Checking kernels on the CPU backend: the race detector (``iris.iris(..., check="races")``).

Every load, store and atomic that a kernel makes on any symmetric heap (through iris's device API, ``as_remote``
pointers, ``DeviceContext``/``IrisDeviceCtx``, or plain ``tl.load``/``gl.store``) is checked with a
happens-before analysis across all ranks, deterministically: the interpreter runs every access, whatever the
timing. Modules, one idea each:

* :mod:`.clocks`: vector clocks of a rank's host and programs (programs of one launch are concurrent);
* :mod:`.shadow`: the shared shadow memory, one /dev/shm file per heap;
* :mod:`.detector`: the checks (FastTrack), release/acquire, host barriers;
* :mod:`.races`: :class:`Race`, :class:`Access`, :class:`RaceWarning`, text and HTML tables.

This package imports nothing of the workbench, ipyparallel or ipywidgets.

Examples
--------
>>> ctx = iris.iris("16MiB", check="races")          # doctest: +SKIP
>>> producer[(1,)](...)                                # doctest: +SKIP
>>> for race in ctx.races():                           # doctest: +SKIP
...     print(race)
race on mailbox[0] (rank 1's heap): store at kernels.py:12 (rank 0, ...) and load at kernels.py:20 (...) are not ordered
"""

from __future__ import annotations

import os

from .races import Access, Race, RaceWarning, races_html_table, races_text_table

CHECKS = ("races",)

__all__ = ["CHECKS", "Access", "Race", "RaceWarning", "choose_check", "races_html_table", "races_text_table"]


def choose_check(check: str | None, backend: str, rank: int) -> str | None:
    """The check a context runs: ``check``, else ``IRIS_CHECK``; None for none.

    Parameters
    ----------
    check : {None, "races", "none"}
        None reads the environment variable ``IRIS_CHECK`` (unset or empty: no check).
    backend : {"cpu", "cuda"}
        The context's backend: checks need the CPU interpreter.
    rank : int
        For the error messages.

    Raises
    ------
    ValueError
        For an unknown check.
    NotImplementedError
        For a check on the CUDA backend.

    Examples
    --------
    >>> choose_check("races", "cpu", 0)
    'races'
    >>> choose_check("none", "cpu", 0) is None
    True
    """
    source = "check"
    if check is None:
        check, source = os.environ.get("IRIS_CHECK", ""), "IRIS_CHECK"
    if check in ("", "none"):
        return None
    if check not in CHECKS:
        raise ValueError(f"rank {rank}: unknown {source}={check!r}: use {' or '.join(map(repr, CHECKS))}, "
                         "or 'none' (or leave it unset) for no check")
    if backend != "cpu":
        raise NotImplementedError(
            f"rank {rank}: {source}={check!r} needs the CPU backend: the race checker watches every access through "
            f"the Triton interpreter, which the {backend} backend does not use. Create the context with "
            "backend='cpu' (or IRIS_BACKEND=cpu) to check for races, or drop the check on the GPU."
        )
    return check
