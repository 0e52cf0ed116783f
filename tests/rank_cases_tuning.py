"""Code that runs inside each rank for tests/test_tuning.py: the autotuning interface of ``iris.ccl`` on CPU ranks,
where timings mean nothing (so a tuning asked for is refused, unless ``IRIS_AUTOTUNE_ANYWAY`` makes the tuner run
to be seen at work). The test sets ``IRIS_AUTOTUNE_CACHE`` to a file of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import warnings

import torch

import iris
from iris.ccl import AUTOTUNE, Config, TuningWarning, tuning


def _tuning_warnings(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if issubclass(w.category, TuningWarning)]


def _choice(workspace) -> dict:
    """What a call ran with, from its workspace's key: (collective, variant, n, dtype, grid, block, group)."""
    _, variant, _, _, grid, block, _ = workspace.key
    return {"variant": variant, "grid": grid, "block": block}


def autotune_on_cpu_ranks():
    ctx = iris.iris("32MiB", backend="cpu")
    world = ctx.get_num_ranks()
    inp = ctx.ones(256, dtype=torch.float32)
    out = ctx.zeros_like(inp)

    # The default config on the CPU: no table for the CPU, nothing tuned and nothing said; the size rules decide.
    plain_said = _tuning_warnings(lambda: ctx.ccl.all_reduce(out, inp))
    plain_ok = bool(torch.equal(out, torch.full_like(out, float(world))))

    # Config.autotune() asked on the CPU: refused, saying why; the defaults run, right.
    out.zero_()
    refused_said = _tuning_warnings(lambda: iris.ccl.all_reduce(out, inp, ctx, config=Config.autotune()))
    refused_ok = bool(torch.equal(out, torch.full_like(out, float(world))))
    cache_after_refusal = os.path.exists(tuning.cache_path())

    # IRIS_AUTOTUNE_ANYWAY: the tuner runs (host clock), rank 0's winner used by every rank and cached.
    os.environ["IRIS_AUTOTUNE_ANYWAY"] = "1"
    big_in = ctx.ones(512, dtype=torch.float32)
    big_out = ctx.zeros_like(big_in)
    tuned = {}
    anyway_said = _tuning_warnings(lambda: tuned.setdefault(
        "ws", iris.ccl.all_reduce(big_out, big_in, ctx, config=Config.autotune(num_warps=4))))
    tuned_ok = bool(torch.equal(big_out, torch.full_like(big_out, float(world))))
    os.environ.pop("IRIS_AUTOTUNE_ANYWAY")
    ctx.barrier()
    cache = json.loads(tuning.cache_path().read_text())

    # The next process of this machine asks the cache, not the clock: a plain config with the same fixed field,
    # without this process's memory of the tuning, runs what was cached.
    tuning._memo.clear()
    big_out.zero_()
    again = iris.ccl.all_reduce(big_out, big_in, ctx, config=Config(num_warps=4))
    again_ok = bool(torch.equal(big_out, torch.full_like(big_out, float(world))))
    ctx.barrier()
    return {
        "plain_said": plain_said, "plain_ok": plain_ok,
        "refused_said": refused_said, "refused_ok": refused_ok, "cache_after_refusal": cache_after_refusal,
        "anyway_said": anyway_said, "tuned_ok": tuned_ok, "tuned": _choice(tuned["ws"]), "cache": cache,
        "again": _choice(again), "again_ok": again_ok,
    }


def autotune_off_uses_the_nearest_world(table_dir):
    """A table for this 'GPU' (the CPU, here) at another world size: with autotuning off, its row is used and the
    world size it was measured at is named."""
    ctx = iris.iris("32MiB", backend="cpu")
    tuning.set_autotune(False)
    tuning.TABLES = __import__("pathlib").Path(table_dir)
    tuning.table_rows.cache_clear()
    inp = ctx.ones(300, dtype=torch.float32)
    out = ctx.zeros_like(inp)
    workspace = {}
    said = _tuning_warnings(lambda: workspace.setdefault("ws", ctx.ccl.all_reduce(out, inp)))
    return {"said": said, "choice": _choice(workspace["ws"]),
            "ok": bool(torch.equal(out, torch.full_like(out, float(ctx.get_num_ranks()))))}


def autotune_sentinel_on_cpu_ranks():
    """Upstream's semantics: AUTOTUNE in one field tunes that field alone (the others kept, the key saying which were
    tuned), IRIS_AUTOTUNE=0 takes what an unset field would, IRIS_AUTOTUNE_BUDGET counts candidates, a cached tuning
    answers the next ask without timing; collectives that tune nothing take the sentinel too; the earlier switch
    still switches, saying what changed."""
    ctx = iris.iris("32MiB", backend="cpu")
    world = ctx.get_num_ranks()
    inp = ctx.ones(384, dtype=torch.float32)
    out = ctx.zeros_like(inp)
    done = {}

    def right() -> bool:
        return bool(torch.equal(out, torch.full_like(out, float(world))))

    # one field asked for on the CPU: refused, saying why, and the call runs right with what None would give
    done["refused_said"] = _tuning_warnings(
        lambda: ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant=AUTOTUNE)))
    done["refused_ok"] = right()

    # IRIS_AUTOTUNE=0: the asked field takes what an unset one would; nothing tuned, nothing said (upstream's)
    os.environ["IRIS_AUTOTUNE"] = "0"
    out.zero_()
    done["off_said"] = _tuning_warnings(
        lambda: ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant=AUTOTUNE, num_warps=2)))
    done["off_ok"] = right()
    os.environ.pop("IRIS_AUTOTUNE")

    # the tuner at work (IRIS_AUTOTUNE_ANYWAY) on the variant alone, 2 candidates at most, each one printed
    os.environ.update(IRIS_AUTOTUNE_ANYWAY="1", IRIS_AUTOTUNE_BUDGET="2", IRIS_AUTOTUNE_VERBOSE="1")
    out.zero_()
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        workspace = ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant=AUTOTUNE, block_size=64))
    for name in ("IRIS_AUTOTUNE_ANYWAY", "IRIS_AUTOTUNE_BUDGET", "IRIS_AUTOTUNE_VERBOSE"):
        os.environ.pop(name)
    done["tuned_ok"] = right()
    done["tuned"] = _choice(workspace)
    done["printed"] = [line for line in printed.getvalue().splitlines() if line.startswith("[iris autotune]")]
    ctx.barrier()
    done["cache"] = json.loads(tuning.cache_path().read_text())

    # asked again in a process that forgot (its memory cleared), without IRIS_AUTOTUNE_ANYWAY: the cache answers,
    # nothing is timed, nothing refused
    tuning._memo.clear()
    out.zero_()
    again = {}
    done["again_said"] = _tuning_warnings(lambda: again.setdefault("ws", ctx.ccl.all_reduce(
        out, inp, config=Config(all_reduce_variant=AUTOTUNE, block_size=64))))
    done["again"], done["again_ok"] = _choice(again["ws"]), right()

    # a collective that tunes nothing takes Config.autotune() as it takes Config(): the sentinels become unset
    sent = ctx.full((4, 2 * world), float(ctx.get_rank() + 1), dtype=torch.float32)
    got = ctx.zeros(4, 2 * world)
    ctx.ccl.all_to_all_v(got, sent, [2] * world, [2] * world, config=Config.autotune())
    done["untuned_ok"] = bool(torch.equal(got[:, :2], torch.ones(4, 2)))

    # a rooted collective tunes its variant as the others do (here made to, on the CPU): rank 0's winner, right
    os.environ.update(IRIS_AUTOTUNE_ANYWAY="1", IRIS_AUTOTUNE_BUDGET="2")
    data = ctx.full((100,), float(ctx.get_rank() + 1), dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        workspace = ctx.ccl.broadcast(data, src=0, config=Config(broadcast_variant=AUTOTUNE, block_size=32))
    for name in ("IRIS_AUTOTUNE_ANYWAY", "IRIS_AUTOTUNE_BUDGET"):
        os.environ.pop(name)
    done["broadcast_ok"] = bool((data == 1.0).all())
    done["broadcast_ran"] = workspace.key[1]

    # the earlier switch: still switches, with a DeprecationWarning naming what to write instead
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        iris.ccl.AUTOTUNE = False
    done["switch_said"] = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    done["switched_off"] = not tuning.autotune_on() and iris.ccl.AUTOTUNE is AUTOTUNE
    tuning.set_autotune(None)
    ctx.barrier()
    return done


def _tune_on_gpu(ctx, collective: str, out, inp) -> dict:
    function = getattr(iris.ccl, collective)
    refused = _tuning_warnings(lambda: function(out, inp, ctx, config=Config.autotune()))
    os.environ["IRIS_AUTOTUNE_ANYWAY"] = "1"
    out.zero_()
    workspace = function(out, inp, ctx, config=Config.autotune())
    os.environ.pop("IRIS_AUTOTUNE_ANYWAY")
    torch.cuda.synchronize()
    expected = float(ctx.get_num_ranks()) if collective in ("all_reduce", "reduce_scatter") else 1.0
    if collective == "reduce_scatter":  # this rank's range of the output holds the sum
        start, end = iris.ccl.owned_range(out.numel(), ctx.get_rank(), ctx.get_num_ranks())
        out = out[start:end]
    return {"refused": refused, "key": [str(part) for part in workspace.key],
            "ok": bool(torch.all(out == expected).item())}


def autotune_on_gpu_ranks_sharing_one_gpu():
    """On ranks that share one GPU: Config.autotune() is refused, saying so; made to run anyway, the tuner times
    its candidates as CUDA-graph replays and every rank runs rank 0's winner; each collective stays right."""
    ctx = iris.iris("1GiB", backend="cuda")
    world = ctx.get_num_ranks()
    results = {
        "all_reduce": _tune_on_gpu(ctx, "all_reduce", ctx.zeros(1 << 16), ctx.ones(1 << 16)),
        "all_gather": _tune_on_gpu(ctx, "all_gather", ctx.zeros(world << 14), ctx.ones(1 << 14)),
        "reduce_scatter": _tune_on_gpu(ctx, "reduce_scatter", ctx.zeros(world << 14), ctx.ones(world << 14)),
        "all_to_all": _tune_on_gpu(ctx, "all_to_all", ctx.zeros(64, 256 * world), ctx.ones(64, 256 * world)),
    }
    ctx.barrier()
    return results
