"""Which host this process counts as on: ``IRIS_HOST`` when set, else the machine's hostname.

``IRIS_HOST`` is a launch option for tests and simulation: ranks on one machine given different values behave
as if on different hosts (their heaps are not mapped to each other, and the map says "network only").

Examples
--------
>>> this_host() == (os.environ.get("IRIS_HOST") or socket.gethostname())
True
"""

from __future__ import annotations

import os
import socket

HOST_VARIABLE = "IRIS_HOST"


def this_host() -> str:
    """The host this process counts as on: ``$IRIS_HOST`` if set (simulation, see the module), else
    ``socket.gethostname()``.

    Examples
    --------
    >>> isinstance(this_host(), str)
    True
    """
    if HOST_VARIABLE not in os.environ:
        return socket.gethostname()
    host = os.environ[HOST_VARIABLE].strip()
    if not host:
        raise ValueError(f"{HOST_VARIABLE} is set but empty in rank {os.environ.get('RANK', '?')}'s environment: "
                         f"give it a host name, or unset it to use this machine's ({socket.gethostname()})")
    return host
