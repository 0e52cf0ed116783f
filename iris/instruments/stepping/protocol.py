"""What a stepped rank and its coordinator say to each other: JSON objects, one per line, over a Unix socket.

A rank says ``hello``, then, for each access it is about to make to a symmetric heap, ``paused`` (the operation)
and, once told to go and done, ``done`` (the values after); ``barrier`` before a host barrier and ``entered``
once let into it; ``finished`` at the end of its cell (or ``failed``, saying why). The coordinator says ``go``,
``released`` (to every rank in a host barrier, once the last has entered it), ``stop`` (the rank's kernel then raises
:class:`SteppingStopped`), or ``read`` (bytes of a heap, answered with ``bytes`` whatever the rank is doing).

Examples
--------
>>> line = encode({"go": True})
>>> line
b'{"go": true}\\n'
"""

from __future__ import annotations

import json
import socket
import threading

from ...base.errors import RaisedAsIs

# How long a paused rank waits for its next step before it gives up (the stepped cell then fails on every rank,
# leaving nothing paused): a person may take their time, but a forgotten run must not hold the ranks for ever.
IDLE_SECONDS = 1800.0


class SteppingStopped(RaisedAsIs, RuntimeError):
    """A stepped run was stopped (by its coordinator, or after :data:`IDLE_SECONDS` without a step): the rank's
    kernel ends here with this error, so that no rank stays paused."""


def encode(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


class Channel:
    """One end of the connection: whole messages in, whole messages out, sends from any thread."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._lock = threading.Lock()
        self._file = sock.makefile("rb")

    def send(self, message: dict) -> None:
        with self._lock:
            self.sock.sendall(encode(message))

    def receive(self) -> dict | None:
        """The next message, None once the other end has closed."""
        try:
            line = self._file.readline()
        except OSError:
            return None
        return json.loads(line) if line else None

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._file.close()
        self.sock.close()
