"""Logging for iris: every record a context writes says which rank wrote it, as upstream Iris's ``[Iris] [r/n]``.

The module is ``iris.base.logging`` as upstream's is, with the same names: ``logger`` (the ``"iris"`` logger),
``set_logger_level``, the level constants and ``IrisFormatter``. The level starts at INFO (upstream's
default) unless ``IRIS_LOG_LEVEL`` names another (DEBUG, INFO, WARNING or ERROR). Debug and info lines
are the message alone; warnings and errors say so, so they stand out in a cell's output.

Examples
--------
>>> import iris
>>> iris.set_logger_level(iris.DEBUG)     # doctest: +SKIP
>>> ctx.info("heap ready")                 # doctest: +SKIP
[Iris] [0/4] heap ready
>>> ctx.warning("heap nearly full")        # doctest: +SKIP
[Iris] [0/4] WARNING: heap nearly full
"""

from __future__ import annotations

import logging
import os

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR

logger = logging.getLogger("iris")


class IrisFormatter(logging.Formatter):
    """``[Iris] [rank/world] message``, ``?`` for what the record does not say (``[Iris] [?/?] message`` for a
    line of ``iris.logger`` written outside any context), as upstream's.

    The rank and world ride on the record as ``iris_rank`` and ``iris_num_ranks`` (upstream's attribute
    names), so records that upstream-style code builds by hand format the same way; a record marked
    ``iris_internal`` (upstream's mark for its library's own lines) also names the module that wrote it:
    ``[Iris] [0/4] [all_gather] message``.

    Examples
    --------
    >>> record = logging.LogRecord("iris", INFO, "", 0, "heap ready", (), None)
    >>> IrisFormatter().format(record)
    '[Iris] [?/?] heap ready'
    """

    def format(self, record: logging.LogRecord) -> str:
        where = f"[Iris] [{getattr(record, 'iris_rank', '?')}/{getattr(record, 'iris_num_ranks', '?')}]"
        if getattr(record, "iris_internal", False):
            where += f" [{record.module}]"
        level = f"{record.levelname}: " if record.levelno >= WARNING else ""
        return f"{where} {level}{record.getMessage()}"


def _install_handler() -> None:
    if not any(getattr(h, "_iris_handler", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(IrisFormatter())
        handler._iris_handler = True
        logger.addHandler(handler)
        logger.propagate = False  # a root handler would print every line twice
    if logger.level == logging.NOTSET:
        requested = os.environ.get("IRIS_LOG_LEVEL", "").strip().upper()
        logger.setLevel(requested if requested in ("DEBUG", "INFO", "WARNING", "ERROR") else INFO)


_install_handler()


def set_logger_level(level: int) -> None:
    """Set the level of iris's logger (``iris.DEBUG``, ``iris.INFO``, ``iris.WARNING``, ``iris.ERROR``).

    Examples
    --------
    >>> iris.set_logger_level(iris.DEBUG)     # doctest: +SKIP
    """
    logger.setLevel(level)


def log(level: int, msg: str, rank: int, world: int) -> None:
    """Log ``msg`` at ``level`` tagged with ``[rank/world]``."""
    logger.log(level, msg, extra={"iris_rank": rank, "iris_num_ranks": world})
