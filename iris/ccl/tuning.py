"""Choices made by measurement: a collective's variant, block, grid and warps for this GPU, world size, dtype and
size, behind upstream Iris's autotuning interface with upstream's semantics.

Each tuned field of a :class:`~iris.ccl.Config` (:data:`~iris.ccl.config.TUNED_FIELDS`) holds one of three things:

* a value: kept (and part of the cache key);
* :data:`iris.ccl.AUTOTUNE`, upstream's sentinel (``Config(all_reduce_variant=AUTOTUNE)``; ``Config.autotune(**fixed)``
  marks every tunable field but ``fixed``; ``Config.get_autotune_fields()`` lists them): tuned at the first call of
  each shape, the other fields kept as given, unless this machine has that tuning cached already;
* None (unset, the default; ``config=None`` is all unset): chosen by measurement, the first of

  1. this machine's tunings, a disk cache keyed by collective, shape, dtype, world size, GPU, the fields the caller
     fixed and the torch/triton versions (``~/.cache/iris/ccl-tuning.json``; ``IRIS_AUTOTUNE_CACHE`` to move it);
  2. the table shipped for this GPU model and world size (``iris/ccl/tables/*.json``, made by
     ``benchmarks/tune_ccl.py`` on the GPUs named in it): the row of the nearest size at or below this one;
  3. a tuning now, when neither has a row and autotuning is on: so ``config=None`` tunes every tunable field where
     nothing is measured, as upstream's does;
  4. with autotuning off, the table's row for the nearest world size, said once;
  5. the size rules (:func:`iris.ccl.rules.choose_variant`...) and the defaults.

A tuning times candidates (each variant with its own block, grid and warps) as CUDA-graph replays with every rank in
step; rank 0's winner is used by every rank and written to the cache. ``IRIS_AUTOTUNE=0`` turns tuning off (fields
marked AUTOTUNE then take what None would: the table, else the defaults; :func:`set_autotune` says the same from a
program), ``IRIS_AUTOTUNE_BUDGET`` counts the candidate configs a tuning may time (default 50; ``"20s"`` gives
seconds instead), ``IRIS_AUTOTUNE_VERBOSE=1`` prints each candidate's time (rank 0, stderr). Timings mean nothing on
the CPU interpreter or on ranks that share a GPU: there a tuning asked for is refused with a warning saying so, and
the table or the defaults are used (``IRIS_AUTOTUNE_ANYWAY=1`` runs the tuner all the same, to watch it).

What changed for programs written against this project's earlier interface: ``iris.ccl.AUTOTUNE`` was a switch and
is the sentinel now; ``iris.ccl.AUTOTUNE = False`` still turns tuning off, with a ``DeprecationWarning`` naming
:func:`set_autotune`, and reading it as a truth value raises a ``TypeError`` that says so. ``IRIS_AUTOTUNE_BUDGET``
counted seconds; a number with a fraction is refused, naming both forms. ``Config(tune=True)`` still means
``Config.autotune()``.

Examples
--------
>>> from iris.ccl import AUTOTUNE, Config
>>> ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant=AUTOTUNE))   # tune the variant  # doctest: +SKIP
>>> config = Config.autotune(num_warps=8)       # tune the rest, keep 8 warps   # doctest: +SKIP
>>> ctx.ccl.all_reduce(out, inp, config=config)                                         # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch

from ..base.gpu_specs import find as find_gpu_spec
from ..base.warning_site import warn_once
from .config import AUTOTUNE, DEFAULTS, TUNED_FIELDS, Config

TABLES = Path(__file__).resolve().parent / "tables"
_memo: dict[str, dict] = {}  # this process's tunings, by cache key: a tuned shape asks the disk once
_refused: set[str] = set()  # keys whose tuning was asked for and refused here (timings mean nothing)
DEFAULT_BUDGET = 50  # candidate configs a tuning may time (upstream's IRIS_AUTOTUNE_BUDGET default)
_switch: list[bool] = []  # set_autotune's word, which wins over IRIS_AUTOTUNE
# A candidate replaces the best so far only when this much faster: about the spread of one graph-timed point between
# runs (2x H200, 2026-11-28: tuned choices of the same point moved within 1-2%), so noise does not choose.
MARGIN = 0.02



class TuningWarning(UserWarning):
    """A tuning could not be made or a table row could not be used as asked; the message says what was used."""


def autotune_on() -> bool:
    """Whether calls tune: :func:`set_autotune`'s word if a program said one, else ``IRIS_AUTOTUNE`` as it is now (on
    unless "0", "false", "no" or "off"; upstream reads it at each call too); never inside :func:`untuned`."""
    if getattr(_untuned, "depth", 0):
        return False
    return _switch[-1] if _switch else env_autotune()


_untuned = threading.local()


@contextlib.contextmanager
def untuned():
    """Calls in this block take this machine's tunings, the shipped tables and the size rules, and never tune.

    For collectives whose callers cannot take part in a tuning: a tuning exchanges over torch.distributed, and
    inside torch.distributed's own ``iris`` backend (:mod:`iris.distributed`) that exchange would be one more call
    of the backend, which would tune again.

    Examples
    --------
    >>> with untuned():                                            # doctest: +SKIP
    ...     ctx.ccl.all_reduce(out, inp)
    """
    _untuned.depth = getattr(_untuned, "depth", 0) + 1
    try:
        yield
    finally:
        _untuned.depth -= 1


def set_autotune(on: bool | None) -> None:
    """Turn tuning on or off for this process (None: back to ``IRIS_AUTOTUNE``). What ``iris.ccl.AUTOTUNE = False``
    did before ``AUTOTUNE`` became upstream's sentinel (that assignment still lands here, with a
    ``DeprecationWarning``).

    Examples
    --------
    >>> set_autotune(False); autotune_on()
    False
    >>> set_autotune(None)
    """
    if on is not None and not isinstance(on, bool):
        raise TypeError(f"set_autotune({on!r}): use True, False or None (IRIS_AUTOTUNE decides)")
    _switch[:] = [] if on is None else [on]


def env_autotune() -> bool:
    return os.environ.get("IRIS_AUTOTUNE", "1").strip().lower() not in ("0", "false", "no", "off")


def budget() -> tuple[str, float]:
    """``IRIS_AUTOTUNE_BUDGET``: ``("candidates", n)``, the candidate configs a tuning may time (upstream's meaning,
    default :data:`DEFAULT_BUDGET`), or ``("seconds", s)`` for a value written with an ``s`` (``"20s"``: this
    project's earlier meaning, now spelled so). A number with a fraction is refused, saying both forms.

    Examples
    --------
    >>> import os; os.environ["IRIS_AUTOTUNE_BUDGET"] = "20s"; budget()
    ('seconds', 20.0)
    >>> del os.environ["IRIS_AUTOTUNE_BUDGET"]; budget()
    ('candidates', 50)
    """
    text = os.environ.get("IRIS_AUTOTUNE_BUDGET", "").strip()
    if not text:
        return "candidates", DEFAULT_BUDGET
    try:
        if text.lower().endswith("s"):
            seconds = float(text[:-1])
            if seconds > 0:
                return "seconds", seconds
        elif int(text) >= 1:
            return "candidates", int(text)
    except ValueError:
        pass
    raise ValueError(f"IRIS_AUTOTUNE_BUDGET={text!r}: give the number of candidate configs a tuning may time, e.g. "
                     f"{DEFAULT_BUDGET} (upstream Iris's meaning), or seconds with an s, e.g. 20s (this budget counted "
                     "seconds before)")


def verbose() -> bool:
    return os.environ.get("IRIS_AUTOTUNE_VERBOSE", "").strip().lower() in ("1", "true", "yes", "on")


def gpu_model(ctx) -> str:
    """The GPU model a table is for: the spec sheet's name (``"H200 SXM"``), else the device's own name; ``"cpu"``."""
    if ctx.get_device().type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(ctx.get_device())
    spec = find_gpu_spec(name, warn=False)
    return spec.name if spec is not None else name


def versions() -> dict:
    import triton

    return {"torch": torch.__version__.split("+")[0], "triton": triton.__version__}


def fixed_fields(collective: str, config: Config) -> dict:
    """The tuned fields the caller set to a value (neither None nor :data:`AUTOTUNE`)."""
    return {name: getattr(config, name) for name in TUNED_FIELDS[collective]
            if getattr(config, name) is not None and getattr(config, name) is not AUTOTUNE}


def cache_key(collective: str, shape, dtype: torch.dtype, world: int, gpu: str, fixed: dict, tuned=None) -> str:
    """The key of a choice: the collective, shape, dtype, world size, GPU and the fields the caller fixed; ``tuned``
    names the fields a tuning chose when they are not all those left open (``Config(all_reduce_variant=AUTOTUNE)``
    with the rest unset)."""
    fixed_text = ",".join(f"{k}={v}" for k, v in sorted(fixed.items()))
    tuned_text = "" if not tuned else f"|tuned={','.join(sorted(tuned))}"
    return (f"{collective}|{'x'.join(map(str, shape))}|{str(dtype).removeprefix('torch.')}|{world}|{gpu}|{fixed_text}"
            f"{tuned_text}")


def cache_path() -> Path:
    explicit = os.environ.get("IRIS_AUTOTUNE_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iris" / "ccl-tuning.json"


def read_cache() -> dict:
    """The cache's entries for this torch/triton; entries of other versions are left out, said once. Read again only
    when the file changed (a collective's first call with a new shape asks; eager code makes many)."""
    path = cache_path()
    try:
        status = path.stat()
    except FileNotFoundError:
        return {}
    return _entries(path, (status.st_mtime_ns, status.st_size))


@functools.lru_cache(maxsize=4)
def _entries(path: Path, changed: tuple) -> dict:
    """:func:`read_cache`'s reading of ``path`` as it was when its (mtime, size) were ``changed``."""
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        warn_once(f"tuning cache {path}", f"the tuning cache {path} could not be read ({error}): it is ignored; "
                  "delete it to start a new one", TuningWarning, "iris")
        return {}
    mine = versions()
    if stored.get("versions") != mine:
        warn_once(f"tuning cache versions {path}", f"the tuning cache {path} was written with {stored.get('versions')}"
                  f", not this {mine}: its tunings are not used (they are tuned again and replace it)",
                  TuningWarning, "iris")
        return {}
    return stored.get("entries", {})


def write_cache(key: str, chosen: dict, us: float, gpu: str) -> None:
    """Add one entry (rank 0 calls it; other ranks read the file)."""
    path = cache_path()
    entries = dict(read_cache())  # a copy: read_cache's answer is kept for the next readers
    entries[key] = {**chosen, "us": round(us, 2), "gpu": gpu, "date": time.strftime("%Y-%m-%d")}
    # Private to this user (0700 folder, 0600 file): on a shared machine no other user reads or replaces the
    # choices this user's collectives make.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    text = json.dumps({"versions": versions(), "entries": entries}, indent=1, sort_keys=True)
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    temporary.replace(path)  # atomic: a rank reading at the same time sees the old file or the new one


@functools.cache
def table_rows(gpu: str) -> list[dict]:
    """The shipped table's rows for ``gpu`` ([] when none is shipped)."""
    for path in sorted(TABLES.glob("*.json")):
        table = json.loads(path.read_text())
        if table.get("gpu") == gpu:
            return table.get("rows", [])
    return []


def table_row(gpu: str, collective: str, world: int, dtype: torch.dtype, nbytes: int, nearest_world: bool = False):
    """The row for the largest measured size at or below ``nbytes`` (else the smallest), this world size (or, with
    ``nearest_world``, the nearest one measured); (row, its world size), or (None, None)."""
    rows = [r for r in table_rows(gpu) if r["collective"] == collective and r["dtype"] == str(dtype).split(".")[-1]]
    worlds = sorted({r["world"] for r in rows})
    if world not in worlds:
        if not (nearest_world and worlds):
            return None, None
        world = min(worlds, key=lambda w: (abs(w - world), w))
    sized = sorted((r for r in rows if r["world"] == world), key=lambda r: r["bytes"])
    below = [r for r in sized if r["bytes"] <= nbytes]
    return (below[-1] if below else sized[0]), world


def chosen_fields(row: dict, collective: str) -> dict:
    return {name: row[name] for name in TUNED_FIELDS[collective] if row.get(name) is not None}


def timings_mean_nothing(ctx, members) -> str | None:
    """Why timings on these ranks would mean nothing (the CPU interpreter, ranks sharing a GPU), or None.
    Collective over ``members`` on a GPU (each rank says where it runs)."""
    if ctx.get_device().type != "cuda":
        return "kernels run on the CPU interpreter here, whose timings say nothing of a GPU's"
    import torch.distributed as dist

    from ..heap.topology import this_host

    places = [None] * members.size
    dist.all_gather_object(places, (this_host(), torch.cuda.current_device()), group=members.group)
    if len(set(places)) < len(places):
        return f"ranks {list(members.ranks)} share GPUs ({places}): each would time the others' work too"
    return None


def tune_anyway() -> bool:
    """``IRIS_AUTOTUNE_ANYWAY=1``: tune where timings mean nothing (the CPU interpreter, a shared GPU), to see the
    tuner work; its choices are then of no use for speed."""
    return os.environ.get("IRIS_AUTOTUNE_ANYWAY", "").strip().lower() in ("1", "true", "yes", "on")


_tuning = threading.local()  # active while a candidate runs: the collective it calls takes its config as given


def tuned_config(ctx, collective: str, config: Config | None, tensor: torch.Tensor, members, run) -> Config:
    """``config`` with its tuned fields chosen (see the module): those holding :data:`AUTOTUNE` by a tuning (this
    machine's cached one, else one now), those left None by this machine's tunings, the shipped table or a tuning
    now; collective over ``members`` when it tunes or asks the cache for a tuning. The fields of other collectives
    keep what they hold (``with_defaults`` clears a sentinel left there).

    ``run(candidate_config)`` makes one call of the collective with a complete config on scratch tensors of the
    call's shape, for the tuner to time; ``tensor`` is the call's input (its shape, dtype and size key the choice).
    """
    config = config or Config()
    if getattr(_tuning, "active", False):  # a candidate being timed: its open fields go to the rules
        return config
    mine = TUNED_FIELDS[collective]
    asked = [name for name in mine if getattr(config, name) is AUTOTUNE]
    unset = [name for name in mine if getattr(config, name) is None]
    fixed = fixed_fields(collective, config)
    if not asked and not unset:
        return config
    # Fields not asked for keep what they hold, unset ones what this machine's tunings or the table give them.
    base = dataclasses.replace(config, **{name: None for name in asked})
    row, _ = lookup(ctx, collective, base, tensor, members.size)
    if row is not None:
        base = chosen_config(base, row, collective, fixed)
    why_not = "autotuning is off (IRIS_AUTOTUNE=0, or iris.ccl.tuning.set_autotune(False))"
    explicit = bool(asked)
    if not asked and row is None and autotune_on():
        asked, unset = unset, []  # nothing measured: config=None tunes every tunable field, as upstream's
    elif not asked or not autotune_on():
        return base if row is not None else _unmeasured(ctx, collective, base, tensor, members, fixed, why_not)
    gpu, world = gpu_model(ctx), members.size
    # the key names the fields tuned when they are not all those the caller left open (a tuning of fewer differs)
    key = cache_key(collective, tensor.shape, tensor.dtype, world, gpu, fixed, asked if unset else None)
    if explicit and key not in _refused:  # asked for: this machine's tuning of it if there is one (rank 0's word)
        known = _memo.get(key)
        if known is None:  # the disk may differ between hosts: every rank takes rank 0's answer
            import torch.distributed as dist

            answer = [chosen_fields(read_cache()[key], collective) if key in read_cache() else None]
            dist.broadcast_object_list(answer, src=members.ranks[0], group=members.group)
            known = answer[0]
        if known is not None:
            _memo[key] = known
            return dataclasses.replace(base, **{name: value for name, value in known.items() if name in asked})
    why_not = timings_mean_nothing(ctx, members)
    if why_not is None or tune_anyway():
        if why_not is not None:
            warn_once(f"tuning anyway {why_not}", f"rank {ctx.cur_rank}: tuning {collective} although {why_not} "
                      "(IRIS_AUTOTUNE_ANYWAY): the choice shows the tuner at work, not what is fast",
                      TuningWarning, "iris")
        described = f"{list(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')} on {world} ranks"
        chosen = tune(ctx, collective, base, fixed, run, members, key, gpu, tensor.numel() * tensor.element_size(),
                      described, fields=asked)
        _memo[key] = chosen
        return dataclasses.replace(base, **chosen)
    if explicit:  # asked by the caller, not by config=None; the same refusal next time, without asking the cache
        _refused.add(key)
        warn_once(f"tuning refused {collective} {why_not}", f"rank {ctx.cur_rank}: {collective} with "
                  f"{', '.join(asked)}=AUTOTUNE: not tuned, {why_not}; the shipped table's choice or the defaults "
                  "are used", TuningWarning, "iris")
    return base if row is not None else _unmeasured(ctx, collective, base, tensor, members, fixed, why_not)


def _unmeasured(ctx, collective, config, tensor, members, fixed, why_not) -> Config:
    """The choice where nothing is measured for this world size and nothing is tuned: the table's row for the
    nearest world size (said once), else the size rules and defaults (``config`` as it is)."""
    row, source = lookup(ctx, collective, config, tensor, members.size, nearest_world=True)
    if row is None:
        return config
    if source.startswith(NEAREST):
        warn_once(f"nearest world {collective} {source}", f"iris.ccl: {collective} on {members.size} ranks: "
                  f"{source}, since nothing is tuned here ({why_not}); benchmarks/tune_ccl.py measures a table",
                  TuningWarning, "iris")
    return chosen_config(config, row, collective, fixed)


NEAREST = "the nearest world size's row"
RULES = "the size rules and defaults"


def lookup(ctx, collective: str, config: Config, tensor: torch.Tensor, world: int, nearest_world: bool = False):
    """The tuned fields this machine's tunings or the shipped table give a call, and where they come from, without
    tuning or saying anything: ``(row, source)``, or ``(None, RULES)`` when neither has one.

    Examples
    --------
    >>> lookup(ctx, "all_reduce", Config(), inp, 2)[1]                  # doctest: +SKIP
    'the H200 SXM table (2 ranks, its 8 KiB row)'
    """
    gpu, nbytes = gpu_model(ctx), tensor.numel() * tensor.element_size()
    key = cache_key(collective, tensor.shape, tensor.dtype, world, gpu, fixed_fields(collective, config))
    if key in _memo:
        return _memo[key], "this machine's tuning"
    cached = read_cache().get(key)
    if cached is not None:
        _memo[key] = chosen_fields(cached, collective)
        return cached, "this machine's tuning"
    row, row_world = table_row(gpu, collective, world, tensor.dtype, nbytes, nearest_world=nearest_world)
    if row is None:
        return None, RULES
    size = f"{row['bytes'] >> 10} KiB" if row["bytes"] >= 1024 else f"{row['bytes']} B"
    if row_world != world:
        return row, f"{NEAREST} ({gpu} table, {row_world} ranks, its {size} row)"
    return row, f"the {gpu} table ({world} ranks, its {size} row)"


def chosen_config(config: Config, row: dict, collective: str, fixed: dict) -> Config:
    """``config`` with a row's tuned fields in those the caller left unset."""
    chosen = {k: v for k, v in chosen_fields(row, collective).items() if k not in fixed}
    return dataclasses.replace(config, tune=False, **chosen)


def candidates(ctx, collective: str, config: Config, fixed: dict, nbytes: int, world: int):
    """Each tuned field's values to try, in the order tried (:func:`tune`: each variant, and for each a coordinate
    search of the other fields, a field at a time from the current best). The first value of each is what the size
    rules and defaults pick, so a tuning keeps them unless another is faster by :data:`MARGIN`."""
    from .inbox import use_inbox
    from .launch import block_size, has_copy_engines
    from .rules import (
        choose_all_to_all_variant,
        choose_gather_variant,
        choose_reduce_variant,
        choose_rooted_variant,
        choose_scatter_variant,
        choose_variant,
    )

    def rule_first(rule, others):
        return [rule] + [value for value in others if value != rule]

    sms = ctx.get_cu_count()
    inbox = ["one_shot"] if use_inbox(nbytes, world) else []
    engines = has_copy_engines(ctx, config)
    space = {
        "all_reduce_variant": rule_first(choose_variant(nbytes, world),
                                         inbox + ["two_shot", "two_shot_push"] + ["ring"] * (world > 2)),
        "reduce_scatter_variant": rule_first(choose_scatter_variant(None, nbytes, world), ["two_shot", "push"]),
        # push's inbox holds copies of the input: tried only where the rule picks it (within its cap), pull always,
        # the copy engines on GPUs from 1 MiB a peer (below it a barrier a step outweighs their transfer)
        "all_gather_variant": rule_first(choose_gather_variant(None, nbytes, world, engines),
                                         ["pull"] + ["copy_engines"] * (engines and nbytes >= 1 << 20)),
        "all_to_all_variant": rule_first(choose_all_to_all_variant(None, nbytes, world, config.use_gluon, engines),
                                         ["pull"] + ["copy_engines"] * (engines and nbytes >= world << 20)),
        # the rooted collectives: push serves every size (no inbox); the copy engines as all_gather's
        "broadcast_variant": rule_first(choose_rooted_variant(None, nbytes, world, engines),
                                        ["push"] + ["copy_engines"] * (engines and nbytes >= 1 << 20)),
        "reduce_variant": rule_first(choose_reduce_variant(None, nbytes, world),
                                     (["push"] if inbox else []) + ["two_shot"]),
        "block_size": rule_first(block_size(ctx, Config()), [4096, 2048, 1024, 8192]),
        "comm_sms": sorted({g for g in (sms, sms // 2, sms // 4, 16, 8) if 1 <= g <= sms}, reverse=True),
        "num_warps": rule_first(DEFAULTS["num_warps"], [8, 4, 16]),
        "block_size_m": rule_first(DEFAULTS["block_size_m"], [32, 16, 64]),
        "block_size_n": rule_first(DEFAULTS["block_size_n"], [64, 128, 32]),
    }
    return {name: space[name] for name in TUNED_FIELDS[collective] if name not in fixed}


def time_us(fn, calls: int, group, on_gpu: bool, graph: bool = True) -> float:
    """µs per call of ``fn``, every rank in step, the slowest rank's: CUDA-graph replays on a GPU (an eager loop
    timed by CUDA events with ``graph=False``), a host clock around ``calls`` eager calls elsewhere (meaningless
    for speed, enough to exercise the tuner)."""
    if on_gpu:
        from ..instruments.replay import replay_time

        return replay_time(fn, calls=calls, timed_ms=5.0, group=group, graph=graph).us
    import torch.distributed as dist

    fn()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    dist.barrier(group=group)
    slowest = [(time.perf_counter() - start) * 1e6 / calls]
    dist.all_reduce(tensor := torch.tensor(slowest, dtype=torch.float64), op=dist.ReduceOp.MAX, group=group)
    return float(tensor[0])


def tune(ctx, collective, config, fixed, run, members, key, gpu, nbytes, described, fields=None) -> dict:
    """Time candidates on every rank in step (collective over ``members``), return rank 0's winner; rank 0 writes it
    to the cache.

    Each variant gets its own coordinate search of the other fields (from their first values, a field at a time),
    and the variants' bests are compared: a variant's launch shape is its own (4x H200, 2026-11-28: reduce_scatter
    two_shot of 256 MiB took 640 µs in blocks of 1024 and 689-710 in the default 4096, where a search that chose
    the variant at the default shape first lost that). The rule's variant is searched first, so a short budget
    keeps its choice. ``fields`` (default: every tuned field not ``fixed``) are searched; the others keep what
    ``config`` holds. ``IRIS_AUTOTUNE_BUDGET`` candidates at most (:func:`budget`)."""
    import torch.distributed as dist

    group, root = members.group, members.ranks[0]
    space = candidates(ctx, collective, config, fixed, nbytes, members.size)
    if fields is not None:
        space = {name: values for name, values in space.items() if name in fields}
    calls = 10 if nbytes <= (1 << 20) else 1  # short calls: several per graph, so the graph launch is amortised
    on_gpu = ctx.get_device().type == "cuda"
    timings: dict[tuple, float] = {}
    started, (unit, limit) = time.monotonic(), budget()
    say = verbose() and members.rank == 0

    def measure(choice: dict) -> float:
        signature = tuple(sorted(choice.items()))
        if signature not in timings:
            candidate = dataclasses.replace(config, tune=False, **choice)
            _tuning.active = True  # the collective called on the candidate takes its config as it is
            try:
                timings[signature] = time_us(lambda: run(candidate), calls, group, on_gpu)
            finally:
                _tuning.active = False
            if say:
                print(f"[iris autotune] {collective} {described} [{len(timings)}]: {choice} "
                      f"{timings[signature]:.1f} us", file=sys.stderr, flush=True)
        return timings[signature]

    def over_budget() -> bool:
        spent = len(timings) if unit == "candidates" else time.monotonic() - started
        over = [spent >= limit]
        dist.broadcast_object_list(over, src=root, group=group)  # rank 0's count or clock decides for every rank
        return over[0]

    def search(start: dict) -> tuple[dict, float]:  # coordinate search of every field but the variant
        best, best_us = start, measure(start)
        if start.get(variant) == "copy_engines":  # no kernel moves its data: no launch shape to search
            return best, best_us
        for name, values in space.items():
            for value in values[1:] if name != variant else ():
                if over_budget():
                    return best, best_us
                trial = {**best, name: value}
                if measure(trial) < best_us * (1 - MARGIN):
                    best, best_us = trial, measure(trial)
        return best, best_us

    variant = f"{collective}_variant"
    first = {name: values[0] for name, values in space.items()}
    best, best_us = search(first)
    for value in space.get(variant, [])[1:]:
        if over_budget():
            break
        trial, trial_us = search({**first, variant: value})
        if trial_us < best_us * (1 - MARGIN):
            best, best_us = trial, trial_us
    winner = [best, best_us]
    dist.broadcast_object_list(winner, src=root, group=group)  # rank 0's winner, for every rank
    best, best_us = winner
    if say:
        print(f"[iris autotune] {collective} {described}: {best} ({best_us:.1f} us, {len(timings)} of at most "
              f"{limit:g} {unit})", file=sys.stderr, flush=True)
    if members.rank == 0:
        write_cache(key, best, best_us, gpu)
    dist.barrier(group=group)  # the cache is written before any rank reads it again
    return best


def ship(rows: list[dict], gpu: str, path: Path | None = None) -> Path:
    """Write (or merge into) the shipped table of ``gpu``: rows replace those of the same collective, world size,
    dtype and size (``benchmarks/tune_ccl.py`` calls it)."""
    path = path or TABLES / f"{gpu.lower().replace(' ', '-')}.json"
    table = json.loads(path.read_text()) if path.exists() else {"gpu": gpu, "rows": []}
    keyed = {(r["collective"], r["world"], r["dtype"], r["bytes"]): r for r in table["rows"]}
    keyed.update({(r["collective"], r["world"], r["dtype"], r["bytes"]): r for r in rows})
    table["rows"] = sorted(keyed.values(), key=lambda r: (r["collective"], r["world"], r["dtype"], r["bytes"]))
    table["measured"] = {**table.get("measured", {}), **versions(), "date": time.strftime("%Y-%m-%d")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    return path



def scratch_runner(ctx, collective, out: torch.Tensor, inp: torch.Tensor, **options):
    """``run(config)`` for :func:`tuned_config`: one call of ``collective(out, inp, ctx, config=..., workspace=...,
    **options)`` on heap tensors shaped as ``out`` and ``inp`` (made at the first run: collectively, as tuning is),
    with a workspace per config, reused, so that a CUDA graph can capture the calls after the first."""
    scratch: list[torch.Tensor] = []
    workspaces: dict[str, object] = {}

    def run(config: Config) -> None:
        if not scratch:
            scratch.append(ctx.zeros(tuple(out.shape), dtype=out.dtype))
            scratch.append(ctx.ones(tuple(inp.shape), dtype=inp.dtype))
        key = repr(config)
        workspaces[key] = collective(scratch[0], scratch[1], ctx, config=config, workspace=workspaces.get(key),
                                     **options)

    return run
