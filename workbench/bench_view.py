"""``workbench.bench``: time callables on every rank in step from one cell, and see how far each is from the GPU.

The candidates are expressions each rank evaluates in its own namespace (a callable's name, or a lambda); every
rank runs :func:`iris.perf.compare` on them together (iris measures), and the notebook draws the report
(:class:`~workbench.widgets.roofline_view.BenchView`: a table, the roofline and the times, with a static form).
A rank that hangs in a candidate is handled as a cell that hangs: interrupted at the timeout, and said where.

Examples
--------
>>> workbench.bench({"mine": "lambda: ag_gemm(out, A, B)", "torch + NCCL": "torch_ag_gemm"},
...                 flops=2 * M * N * K, bytes=2 * (M * K + K * N + M * N))     # doctest: +SKIP
"""

from __future__ import annotations

from .hang_report import display_hang

REPORT_NAME = "_iris_bench_report"  # where each rank keeps its last report (the view reads it from there)
SWEEP_NAME = "_iris_sweep_report"  # the same for the last sweep
OPTIONS = ("graph", "n_warmup", "n_repeat", "preamble", "dtype", "measure_ceilings", "allow_shared_gpu", "runner")
RUNNERS = ("compare", "iris.bench")


def bench(candidates, flops=None, bytes=None, peer_bytes=None, *, timeout: float | None = None,  # noqa: A002
          **options):
    """Time ``candidates`` on every rank of the current workbench and show the report.

    Parameters
    ----------
    candidates : dict or list
        Label -> expression evaluated in each rank's namespace to a zero-argument callable
        (``"my_launch"``, ``"lambda: ctx.ccl.all_reduce(out, inp)"``); a list of expressions labels each by itself.
    flops, bytes, peer_bytes : int or dict, optional
        The work of one call (per rank): floating-point operations, bytes of memory traffic, bytes over each peer
        link; one number for all candidates or a dict by label. What TFLOP/s, GB/s and the roofline need.
    timeout : float, optional
        Seconds before the ranks are interrupted (default: the workbench's cell timeout). The first call on GPUs
        also measures the machine's ceilings (a few seconds).
    **options
        ``graph`` ("auto", True, False), ``n_warmup``, ``n_repeat``, ``preamble`` (an expression, evaluated
        like a candidate), ``dtype`` (a torch dtype's name, e.g. "float16"; default bfloat16),
        ``measure_ceilings``, ``allow_shared_gpu``: see :func:`iris.perf.compare`; ``runner="iris.bench"`` times
        the same candidates as an :mod:`iris.bench` benchmark instead (:func:`iris.perf.run_benchmark`: upstream's
        protocol, each call on its own; no ``graph`` or ``preamble`` there).

    Returns
    -------
    BenchView
        The table and the pictures, live and static (``view.report`` is the :class:`iris.perf.PerfReport`).

    Examples
    --------
    >>> view = workbench.bench(["lambda: x.add_(1)"], bytes=2 * 4 * 1024)     # doctest: +SKIP
    >>> view.report.results[0].mode                                           # doctest: +SKIP
    'interpreter'
    """
    import torch

    from .session import current
    from .widgets.roofline_view import BenchView

    expressions = _expressions(candidates)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"workbench.bench got {unknown}: the options are {list(OPTIONS)}")
    if not isinstance(options.get("preamble", ""), str):
        raise TypeError("workbench.bench: preamble= is an expression (a string) each rank evaluates to a callable, "
                        f"like the candidates; got {options['preamble']!r}")
    dtype = _literal(options.get("dtype", "bfloat16"))
    if not isinstance(dtype, str) or not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise TypeError(f"workbench.bench: dtype={options['dtype']!r} is not a torch dtype: give one or its name, "
                        "e.g. torch.float16 or 'float16'")
    runner = options.get("runner", "compare")
    if runner not in RUNNERS or runner == "iris.bench" and {"graph", "preamble"} & set(options):
        raise TypeError(f"workbench.bench: runner={runner!r}: use one of {list(RUNNERS)} (graph= and preamble= go "
                        "with 'compare' only)")
    wb = current()
    work = ", ".join(repr(_literal(value)) for value in (flops, bytes, peer_bytes))
    call = (f"from workbench.bench_view import measure_on_rank as _iris_measure_on_rank\n"
            f"{REPORT_NAME} = _iris_measure_on_rank({expressions!r}, {work}, {_literal(options)!r})\n")
    report = wb.run(call, timeout=timeout)
    display_hang(report)
    report.raise_on_failure()
    return BenchView(wb.pull(REPORT_NAME, ranks=[0])[0], expressions)


def sweep(collective: str = "all_reduce", sizes=None, dtype="bfloat16", peers: bool = True, *,
          timeout: float | None = None):
    """Time one collective of ``ctx.ccl`` over sizes on every rank of the current workbench, beside its peers
    (torch.distributed's over NCCL on GPUs, gloo on the CPU; for all_reduce on GPUs also NCCL's symmetric kernels and
    torch symmetric memory's one_shot and two_shot, :mod:`iris.perf.peers`), and show what ran at each size and why.

    Parameters
    ----------
    collective : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    sizes : list of int, optional
        Bytes per call (default: 8 KiB to 64 MiB on GPUs, a few KiB on the CPU interpreter).
    dtype : torch.dtype or str
    peers : bool
        Time the peers beside it.
    timeout : float, optional
        Seconds before the ranks are interrupted (default: the workbench's cell timeout).

    Returns
    -------
    SweepView
        Per size: variant, grid and block that ran, what chose them (this machine's tuning, the shipped table, the
        size rules), µs, bus GB/s and its share of the peer link; the peers' µs; static form included
        (``view.report`` is the :class:`iris.perf.SweepReport`).

    Examples
    --------
    >>> workbench.sweep("all_gather", sizes=[64 << 10, 16 << 20])       # doctest: +SKIP
    """
    from .session import current
    from .widgets.sweep_view import SweepView

    dtype = _literal(dtype)
    wb = current()
    call = (f"import iris as _iris, torch as _torch\n"
            f"{SWEEP_NAME} = _iris.perf.sweep(ctx, {collective!r}, {_literal(list(sizes) if sizes else None)!r}, "
            f"getattr(_torch, {dtype!r}), {bool(peers)!r})\n")
    report = wb.run(call, timeout=timeout)
    display_hang(report)
    report.raise_on_failure()
    return SweepView(wb.pull(SWEEP_NAME, ranks=[0])[0])


def _literal(value):
    """``value`` as Python literals, so that its repr runs in a rank's namespace whatever that imported: numpy
    numbers as int or float, a torch dtype as its name (``measure_on_rank`` turns the name back), dicts inside.

    Examples
    --------
    >>> import numpy, torch
    >>> _literal({"flops": numpy.int64(8), "dtype": torch.float16, "graph": True})
    {'flops': 8, 'dtype': 'float16', 'graph': True}
    """
    import numbers

    import torch

    if isinstance(value, dict):
        return {key: _literal(item) for key, item in value.items()}
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _expressions(candidates) -> dict:
    """{label: expression} from a dict or a list of expressions; a clear error for anything else."""
    if isinstance(candidates, (list, tuple)):
        candidates = {expression: expression for expression in candidates}
    if not isinstance(candidates, dict) or not candidates:
        raise TypeError("workbench.bench: candidates are a dict label -> expression (or a list of expressions), "
                        f"evaluated on every rank; got {candidates!r}")
    bad = {label: e for label, e in candidates.items() if not isinstance(e, str)}
    if bad:
        raise TypeError(f"workbench.bench: candidates {sorted(bad)} are not expressions (strings): each rank "
                        "evaluates them in its own namespace, e.g. {'mine': 'lambda: kernel[grid](x, y)'}")
    return {str(label): expression for label, expression in candidates.items()}


def measure_on_rank(expressions: dict, flops, nbytes, peer_bytes, options: dict):
    """Inside each rank: evaluate the candidates (and ``preamble``) and run :func:`iris.perf.compare` on them.

    Collective: a name missing or an expression failing on some rank is raised on every rank, naming them.
    """
    import torch

    import iris
    from iris.instruments.replay import everyone

    from .widgets.probes import lookup

    ctx = lookup("ctx")["value"]
    found = {label: lookup(expression) for label, expression in expressions.items()}
    preamble = lookup(options["preamble"]) if options.get("preamble") is not None else None
    failures = {label: f["message"] for label, f in found.items() if f["status"] != "ok"}
    if preamble is not None and preamble["status"] != "ok":
        failures["preamble="] = preamble["message"]
    all_failures = [(rank, f) for rank, f in enumerate(everyone(failures, ctx.group.group)) if f]
    if all_failures:
        said = "; ".join(f"rank {rank}: " + ", ".join(f"{label!r}: {message}" for label, message in f.items())
                         for rank, f in all_failures)
        raise iris.perf.PerfError(f"candidates that could not be evaluated: {said}. Define them in a "
                                  "%%iris_kernel cell first (every rank runs it)")
    options = dict(options)
    if preamble is not None:
        options["preamble"] = preamble["value"]
    if "dtype" in options:  # a name (bench() sends a torch dtype by its name)
        options["dtype"] = getattr(torch, options["dtype"])
    measure = iris.perf.run_benchmark if options.pop("runner", "compare") == "iris.bench" else iris.perf.compare
    return measure(ctx, {label: f["value"] for label, f in found.items()}, flops, nbytes, peer_bytes, **options)
