"""Logging for iris: every record says which rank wrote it, as ``[rank/world]``.

Examples
--------
>>> import iris
>>> iris.set_logger_level(iris.DEBUG)     # doctest: +SKIP
>>> ctx.info("heap ready")                 # doctest: +SKIP
[iris 0/4] INFO heap ready
"""

from __future__ import annotations

import logging

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR

logger = logging.getLogger("iris")


class _RankFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        rank = getattr(record, "iris_rank", "?")
        world = getattr(record, "iris_world", "?")
        return f"[iris {rank}/{world}] {record.levelname} {record.getMessage()}"


def _install_handler() -> None:
    if not any(getattr(h, "_iris_handler", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(_RankFormatter())
        handler._iris_handler = True
        logger.addHandler(handler)
        logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


_install_handler()


def set_logger_level(level: int) -> None:
    """Set the level of iris's logger (``iris.DEBUG``, ``iris.INFO``, ``iris.WARNING``, ``iris.ERROR``)."""
    logger.setLevel(level)


def log(level: int, msg: str, rank: int, world: int) -> None:
    """Log ``msg`` at ``level`` tagged with ``[rank/world]``."""
    logger.log(level, msg, extra={"iris_rank": rank, "iris_world": world})
