"""Will a cluster's heaps fit on this machine? Said before any rank starts, with what is free and who holds the rest.

On a shared machine (a class on one server) /dev/shm, host memory and the GPUs' memory are shared by every
student. A rank that finds no room for its heap fails half-way through a start, after its peers made theirs;
:func:`check_room` asks the system first and refuses at once, saying what the heaps need, what is free, who holds
the most (where the system tells: the owners of /dev/shm's files, the largest processes, the GPU's processes) and
what to do.

* CPU backend: every rank's heap is a /dev/shm file of ``heap_size`` bytes, so this host's /dev/shm and its free
  memory must hold ``n * heap_size`` (the rule each rank applies too: :func:`iris.heap.cpu.shm_free_bytes`).
* cuda backend: rank ``r``'s heap lives on visible GPU ``r % count`` (:func:`iris.base.backend.gpu_for_rank`), so
  each GPU's free memory must hold ``heap_size`` times the ranks it gets (read with ``nvidia-smi``, which makes no
  CUDA context in the notebook; without it there is nothing to check here, and each rank says what it found).

Examples
--------
>>> check_room(n=4, heap_size=1 << 40, backend="cpu")          # doctest: +SKIP
Traceback (most recent call last):
WorkbenchError: cannot start 4 ranks with 1024.0 GiB heaps on the cpu backend: their heaps need 4096.0 GiB of
/dev/shm and it has 31.4 GiB free of 31.4 GiB (held by alice 2.0 GiB) ... At most 7.8 GiB per rank fits now ...
"""

from __future__ import annotations

import collections
import os
import pwd
import shutil
import subprocess

import psutil

from iris.base.sizes import format_size
from iris.heap.cpu import SHM_DIR, shm_free_bytes

from .report import WorkbenchError

HOLDERS_SHOWN = 3
NVIDIA_SMI_SECONDS = 10.0


def check_room(n: int, heap_size: int, backend: str) -> None:
    """Raise :class:`WorkbenchError` when this host cannot hold the heaps of ``n`` ranks of ``heap_size`` bytes.

    ``backend`` is what the ranks will use, ``"cpu"`` or ``"cuda"`` (resolved, not ``"auto"``).
    """
    problems, largest = _cpu_shortfalls(n, heap_size) if backend == "cpu" else _gpu_shortfalls(n, heap_size)
    if problems:
        fits = (f"At most {format_size(largest)} per rank fits now (--heap {largest >> 20}MiB)"
                if largest >= 1 << 20 else "No heap fits now")
        raise WorkbenchError(f"cannot start {n} ranks with {format_size(heap_size)} heaps on the {backend} backend: "
                             + "; ".join(problems) + f". {fits}: ask for a smaller heap or fewer ranks, or wait "
                             "until the memory is free")


def _cpu_shortfalls(n: int, heap_size: int) -> tuple[list[str], int]:
    """What does not fit of ``n`` heaps in /dev/shm and host memory, and the largest heap that fits both."""
    need, problems = n * heap_size, []
    free, total = shm_free_bytes(), shutil.disk_usage(SHM_DIR).total
    if need > free:
        problems.append(f"their heaps need {format_size(need)} of {SHM_DIR} and it has {format_size(free)} free "
                        f"of {format_size(total)}{_holders(shm_holders(), 'held by')}")
    available = psutil.virtual_memory().available
    if need > available:
        problems.append(f"their heaps need {format_size(need)} of host memory and {format_size(available)} is "
                        f"available{_holders(memory_holders(), 'the largest processes:')}")
    return problems, min(free, available) // n


def _gpu_shortfalls(n: int, heap_size: int) -> tuple[list[str], int]:
    """What does not fit on each visible GPU of the heaps of the ranks it gets, and the largest heap that fits."""
    gpus = visible_gpus()
    if not gpus:
        return [], heap_size
    ranks_on = collections.Counter(rank % len(gpus) for rank in range(n))
    problems = []
    for index, ranks in sorted(ranks_on.items()):
        gpu = gpus[index]
        if ranks * heap_size > gpu["free"]:
            who = [(f"pid {p['pid']} ({p['user']})", p["used"]) for p in gpu["processes"]]
            problems.append(f"GPU {index} ({gpu['name']}) gets {ranks} rank{'s' * (ranks > 1)}, whose heaps need "
                            f"{format_size(ranks * heap_size)}, and has {format_size(gpu['free'])} free of "
                            f"{format_size(gpu['total'])}{_holders(who, 'held by')}")
    return problems, min(gpus[index]["free"] // ranks for index, ranks in ranks_on.items())


def _holders(holders: list[tuple[str, int]], lead: str) -> str:
    """``" (held by alice 3.0 GiB, bob 1.0 GiB)"``: the few largest holders, or nothing when none is known."""
    largest = sorted(holders, key=lambda h: -h[1])[:HOLDERS_SHOWN]
    return f" ({lead} " + ", ".join(f"{who} {format_size(size)}" for who, size in largest) + ")" if largest else ""


def shm_holders() -> list[tuple[str, int]]:
    """(user, bytes) for each owner of files in /dev/shm, counting the pages the files use (they may be sparse)."""
    used: collections.Counter = collections.Counter()
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    for name in names:
        try:
            stats = os.lstat(os.path.join(SHM_DIR, name))
        except OSError:  # gone meanwhile
            continue
        used[_user(stats.st_uid)] += stats.st_blocks * 512
    return [(user, size) for user, size in used.items() if size]


def memory_holders() -> list[tuple[str, int]]:
    """(``"pid N (user, name)"``, resident bytes) of this host's processes (those whose memory the system shows)."""
    found = []
    for process in psutil.process_iter(["pid", "username", "name", "memory_info"]):
        memory = process.info["memory_info"]
        if memory is not None:
            found.append((f"pid {process.info['pid']} ({process.info['username']}, {process.info['name']})",
                          memory.rss))
    return found


def visible_gpus() -> list[dict]:
    """The GPUs this process's ranks can use, in CUDA's order (``CUDA_VISIBLE_DEVICES``), as ``nvidia-smi`` sees
    them: name, free and total bytes, and the processes holding memory there (pid, user, bytes).

    Empty when ``nvidia-smi`` is not there or does not answer, or when ``CUDA_VISIBLE_DEVICES`` names GPUs in a
    way not matched here (MIG instances): then the ranks check their own heaps.
    """
    gpus = _nvidia_smi("--query-gpu=index,uuid,name,memory.free,memory.total")
    if gpus is None:
        return []
    by_key = {}
    for index, uuid, name, free, total in gpus:
        gpu = {"name": name, "free": int(free) << 20, "total": int(total) << 20, "processes": [], "uuid": uuid}
        by_key[index] = by_key[uuid] = gpu
    for uuid, pid, used in _nvidia_smi("--query-compute-apps=gpu_uuid,pid,used_memory") or []:
        if uuid in by_key and used.isdigit():
            by_key[uuid]["processes"].append({"pid": int(pid), "user": _process_user(int(pid)),
                                              "used": int(used) << 20})
    wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is None:
        return [by_key[index] for index, *_ in gpus]
    chosen = []
    for key in (k.strip() for k in wanted.split(",") if k.strip()):
        gpu = by_key.get(key) or next((g for k, g in by_key.items() if k.startswith("GPU-") and
                                       key.startswith("GPU-") and k.startswith(key)), None)
        if gpu is None:
            return []
        chosen.append(gpu)
    return chosen


def _nvidia_smi(query: str) -> list[list[str]] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=NVIDIA_SMI_SECONDS, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.strip()]


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _process_user(pid: int) -> str:
    try:
        return psutil.Process(pid).username()
    except (psutil.Error, KeyError):
        return "user unknown"
