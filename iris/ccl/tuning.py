"""Choices made by measurement: a collective's variant, block, grid and warps for this GPU, world size, dtype and
size, upstream Iris's autotuning interface over them.

A collective call fills each field of its :class:`~iris.ccl.Config` that the caller left unset (None), from the
first of:

1. this machine's tunings, a disk cache keyed by collective, shape, dtype, world size, GPU, the fields the caller
   fixed and the torch/triton versions (``~/.cache/iris/ccl-tuning.json``; ``IRIS_AUTOTUNE_CACHE`` to move it);
2. the table shipped for this GPU model and world size (``iris/ccl/tables/*.json``, made by
   ``benchmarks/tune_ccl.py`` on the GPUs named in it): the row of the nearest size at or below this one;
3. a tuning now, when autotuning is on (``iris.ccl.AUTOTUNE``, ``IRIS_AUTOTUNE=0`` turns it off) and neither
   has a row: candidates (each variant with its own block, grid and warps) timed as CUDA-graph replays with
   every rank in step, rank 0's winner used by every rank and written to the cache; ``IRIS_AUTOTUNE_BUDGET``
   seconds at most (default 20), ``IRIS_AUTOTUNE_VERBOSE=1`` prints each candidate's time;
4. with autotuning off, the table's row for the nearest world size, said once;
5. the size rules (:func:`iris.ccl.rules.choose_variant`...) and the defaults.

``Config.autotune()`` asks for a tuning now, whatever the table says. Timings mean nothing on the CPU
interpreter or on ranks that share a GPU: there a tuning asked for is refused with a warning saying so, and the
table or the defaults are used.

Examples
--------
>>> config = iris.ccl.Config.autotune(num_warps=8)       # tune the rest, keep 8 warps   # doctest: +SKIP
>>> ctx.ccl.all_reduce(out, inp, config=config)                                         # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from pathlib import Path

import torch

from ..base.gpu_specs import find as find_gpu_spec
from ..base.warning_site import warn_once
from .config import DEFAULTS, Config

TABLES = Path(__file__).resolve().parent / "tables"
_memo: dict[str, dict] = {}  # this process's tunings, by cache key: a tuned shape asks the disk once
DEFAULT_BUDGET_S = 20.0
# A candidate replaces the best so far only when this much faster: about the spread of one graph-timed point between
# runs (2x H200, 2026-11-28: tuned choices of the same point moved within 1-2%), so noise does not choose.
MARGIN = 0.02

# The fields each collective's tuning chooses; the others are the caller's.
TUNED_FIELDS = {
    "all_reduce": ("all_reduce_variant", "block_size", "comm_sms", "num_warps"),
    "all_gather": ("all_gather_variant", "block_size", "comm_sms", "num_warps"),
    "reduce_scatter": ("reduce_scatter_variant", "block_size", "comm_sms", "num_warps"),
    "all_to_all": ("all_to_all_variant", "block_size_m", "block_size_n", "comm_sms", "num_warps"),
}


class TuningWarning(UserWarning):
    """A tuning could not be made or a table row could not be used as asked; the message says what was used."""


def autotune_on() -> bool:
    """``iris.ccl.AUTOTUNE``: the package's attribute, which a program may set (its start value: ``IRIS_AUTOTUNE``,
    on unless "0", "false" or "no")."""
    return bool(getattr(sys.modules[__package__], "AUTOTUNE", True))


def env_autotune() -> bool:
    return os.environ.get("IRIS_AUTOTUNE", "1").strip().lower() not in ("0", "false", "no", "off")


def budget_s() -> float:
    text = os.environ.get("IRIS_AUTOTUNE_BUDGET", "")
    try:
        return float(text) if text.strip() else DEFAULT_BUDGET_S
    except ValueError:
        raise ValueError(f"IRIS_AUTOTUNE_BUDGET={text!r}: give the seconds a tuning may take, e.g. 20") from None


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
    """The tuned fields the caller set (not None)."""
    return {name: getattr(config, name) for name in TUNED_FIELDS[collective] if getattr(config, name) is not None}


def cache_key(collective: str, shape, dtype: torch.dtype, world: int, gpu: str, fixed: dict) -> str:
    fixed_text = ",".join(f"{k}={v}" for k, v in sorted(fixed.items()))
    return f"{collective}|{'x'.join(map(str, shape))}|{str(dtype).removeprefix('torch.')}|{world}|{gpu}|{fixed_text}"


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


def tuned_config(ctx, collective: str, config: Config | None, tensor: torch.Tensor, members, run) -> Config:
    """``config`` with the tuned fields the caller left unset filled in (see the module); collective over
    ``members`` when it tunes.

    ``run(candidate_config)`` makes one call of the collective with a complete config on scratch tensors of the
    call's shape, for the tuner to time; ``tensor`` is the call's input (its shape, dtype and size key the choice).
    """
    config = config or Config()
    asked, fixed = config.tune, fixed_fields(collective, config)
    if len(fixed) == len(TUNED_FIELDS[collective]) and not asked:
        return config
    if not asked:
        row, _ = lookup(ctx, collective, config, tensor, members.size)
        if row is not None:
            return chosen_config(config, row, collective, fixed)
    why_not = "autotuning is off (iris.ccl.AUTOTUNE, IRIS_AUTOTUNE)"
    if asked or autotune_on():
        why_not = timings_mean_nothing(ctx, members)
        if why_not is None or tune_anyway():
            if why_not is not None:
                warn_once(f"tuning anyway {why_not}", f"rank {ctx.cur_rank}: tuning {collective} although {why_not} "
                          "(IRIS_AUTOTUNE_ANYWAY): the choice shows the tuner at work, not what is fast",
                          TuningWarning, "iris")
            gpu, world = gpu_model(ctx), members.size
            key = cache_key(collective, tensor.shape, tensor.dtype, world, gpu, fixed)
            described = f"{list(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')} on {world} ranks"
            chosen = tune(ctx, collective, config, fixed, run, members, key, gpu,
                          tensor.numel() * tensor.element_size(), described)
            _memo[key] = chosen
            return dataclasses.replace(config, tune=False, **chosen)
        if asked:
            warn_once(f"tuning refused {collective} {why_not}", f"rank {ctx.cur_rank}: Config.autotune() for "
                      f"{collective}: not tuned, {why_not}; the shipped table's choice or the defaults are used",
                      TuningWarning, "iris")
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
    from .rules import choose_all_to_all_variant, choose_gather_variant, choose_scatter_variant, choose_variant

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


def tune(ctx, collective, config, fixed, run, members, key, gpu, nbytes, described) -> dict:
    """Time candidates on every rank in step (collective over ``members``), return rank 0's winner; rank 0 writes it
    to the cache.

    Each variant gets its own coordinate search of the other fields (from their first values, a field at a time),
    and the variants' bests are compared: a variant's launch shape is its own (4x H200, 2026-11-28: reduce_scatter
    two_shot of 256 MiB took 640 µs in blocks of 1024 and 689-710 in the default 4096, where a search that chose
    the variant at the default shape first lost that). The rule's variant is searched first, so a short budget
    keeps its choice."""
    import torch.distributed as dist

    group, root = members.group, members.ranks[0]
    space = candidates(ctx, collective, config, fixed, nbytes, members.size)
    calls = 10 if nbytes <= (1 << 20) else 1  # short calls: several per graph, so the graph launch is amortised
    on_gpu = ctx.get_device().type == "cuda"
    timings: dict[tuple, float] = {}
    started, budget = time.monotonic(), budget_s()

    def measure(choice: dict) -> float:
        signature = tuple(sorted(choice.items()))
        if signature not in timings:
            candidate = dataclasses.replace(config, tune=False, **choice)
            timings[signature] = time_us(lambda: run(candidate), calls, group, on_gpu)
            if verbose() and members.rank == 0:
                print(f"iris.ccl autotune {collective} {described}: {choice} {timings[signature]:.1f} us", flush=True)
        return timings[signature]

    def over_budget() -> bool:
        over = [time.monotonic() - started > budget]
        dist.broadcast_object_list(over, src=root, group=group)  # rank 0's clock decides for every rank
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
