"""A warm parent for rank processes: ``python -m tests.rank_zygote`` imports iris, torch and triton once, then
forks one child per rank on request (tests/multirank.py's :class:`Zygote`), so that each rank of a test is still a
fresh process of its own but does not pay the interpreter's start-up and ``import iris`` again (about 1.5 s of CPU
a rank; most multi-rank tests are a few seconds of work).

A child becomes exactly what ``python -m tests.rank_main target args`` would be: the environment the test gave it
(``os.environ`` replaced before anything of the test is imported: the rank cases' modules, which read it at import,
are imported in the child, never here), stdout and stderr to the rank's log, stdin from /dev/null, and the
interpreter's normal exit (atexit handlers, an exception's traceback in the log and exit code 1). The zygote only
imports; it is started with the test's environment (tests/multirank.py starts one per distinct environment), so
what iris, torch and triton read from the environment at import is what a fresh rank would have read.

Protocol, a JSON object a line: requests on stdin ``{"id", "env", "argv", "log", "cwd"}``; on the fd named by
``$IRIS_ZYGOTE_FD``, ``{"id", "pid"}`` when a child started and ``{"pid", "code"}`` when it ended (``code`` as
``Popen.returncode``: negative for a signal). End of stdin: the zygote exits.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import random
import select
import signal
import sys
import threading


def _send(fd: int, message: dict) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def serve():
    """Import, then fork children on request until stdin ends; in a child, return its request."""
    reply = int(os.environ.pop("IRIS_ZYGOTE_FD"))
    import torch  # noqa: F401  (the expensive imports, once)
    import torch.distributed  # noqa: F401
    import triton  # noqa: F401

    import iris  # noqa: F401
    import tests.rank_main  # noqa: F401

    # No Python thread may run here: a fork could copy a lock one of them holds. (``import torch`` leaves one idle
    # native thread, waiting on a futex; torch's DataLoader forks its workers after far more than an import.)
    if threading.active_count() != 1:
        _send(reply, {"error": f"the zygote has Python threads after its imports: {threading.enumerate()}"})
        return None
    _send(reply, {"ready": os.getpid()})
    pending = b""
    children = set()
    while True:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            _send(reply, {"pid": pid, "code": os.waitstatus_to_exitcode(status)})
        readable, _, _ = select.select([0], [], [], 0.02 if children else 0.5)
        if not readable:
            continue
        data = os.read(0, 1 << 16)
        if not data:
            return None
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(reply)
                return request
            children.add(pid)
            _send(reply, {"id": request["id"], "pid": pid})


def _own_addresses(rank: int) -> None:
    """Move where this child's next mappings go, so that its heaps land at addresses of its own, as a process
    started by exec would (address space layout randomisation; a fork inherits the zygote's layout, and ranks
    forked alike would map their heaps at the same addresses, which would hide a missing pointer translation).

    Every hole between the zygote's mappings is filled with an inaccessible reservation (the kernel places a new
    mapping in the highest hole it fits), then a reservation of a size that depends on the rank (disjoint ranges)
    and on chance is made below them all: the heaps, and whatever is mapped after, start below it. Reservations
    are PROT_NONE and MAP_NORESERVE: address space, no memory."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000  # MAP_NORESERVE
    failed = ctypes.c_void_p(-1).value
    spans, heap_end, top = [], 0, None
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            name = fields[5] if len(fields) > 5 else ""
            if name == "[stack]":
                top = start
            elif name == "[heap]":
                heap_end = end
            spans.append((start, end))
    spans.sort()
    for (_, low_end), (high_start, _) in zip(spans, spans[1:], strict=False):
        # Holes of the mapping area only: not the one below the stack (it must stay free to grow into), nor the
        # terabytes between the program's brk heap and the shared libraries.
        if heap_end <= low_end < high_start < (top or 1 << 64) and high_start - low_end < 1 << 40:
            libc.mmap(low_end, high_start - low_end, 0, flags | 0x100000, -1, 0)  # MAP_FIXED_NOREPLACE
    pages = (rank << 14) + random.SystemRandom().randrange(1, 1 << 14)  # rank r: r * 64 MiB + up to 64 MiB
    if libc.mmap(None, pages * mmap.PAGESIZE, 0, flags, -1, 0) == failed:
        raise OSError(ctypes.get_errno(), "the rank zygote could not reserve address space")


def become_rank(request: dict) -> None:
    """In the child: the log as stdout and stderr, /dev/null as stdin, the test's environment, directory and argv."""
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [os.path.join(request["cwd"], "tests", "rank_main.py"), *request["argv"]]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _own_addresses(int(request["env"].get("RANK", "0")))


if __name__ == "__main__":
    job = serve()
    if job is None:
        sys.exit(0)
    become_rank(job)
    del job
    from tests.rank_main import main

    main()
