"""Code that runs inside each rank for tests/test_tuning.py: the autotuning interface of ``iris.ccl`` on CPU ranks,
where timings mean nothing (so a tuning asked for is refused, unless ``IRIS_AUTOTUNE_ANYWAY`` makes the tuner run
to be seen at work). The test sets ``IRIS_AUTOTUNE_CACHE`` to a file of its own.
"""

from __future__ import annotations

import json
import os
import warnings

import torch

import iris
from iris.ccl import Config, TuningWarning, tuning


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
    iris.ccl.AUTOTUNE = False
    tuning.TABLES = __import__("pathlib").Path(table_dir)
    tuning.table_rows.cache_clear()
    inp = ctx.ones(300, dtype=torch.float32)
    out = ctx.zeros_like(inp)
    workspace = {}
    said = _tuning_warnings(lambda: workspace.setdefault("ws", ctx.ccl.all_reduce(out, inp)))
    return {"said": said, "choice": _choice(workspace["ws"]),
            "ok": bool(torch.equal(out, torch.full_like(out, float(ctx.get_num_ranks()))))}


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
