"""``iris.perf.compare``: time several callables on every rank in step and say how far each is from the hardware.

For each candidate (a label and a zero-argument callable, e.g. a hand-written kernel's launch, ``torch.matmul``
then an NCCL collective, ``ctx.ops``): the slowest rank's time per call, CUDA-graph timed where every rank can
capture the call (:func:`iris.instruments.replay.replay_time`; eager otherwise, and the report says which and why);
achieved TFLOP/s (``flops`` / time), GB/s (``bytes`` / time) and peer GB/s (``peer_bytes`` / time: the bytes
crossing each link); and the share of the roof: the GPU's spec sheet (:mod:`iris.base.gpu_specs`) and the ceilings
measured now (:mod:`iris.perf.ceilings`). iris measures; the workbench draws (``workbench.bench``).

On the CPU backend the kernels run in the Triton interpreter: candidates are timed eagerly with
:func:`iris.do_bench` and labelled as interpreter times, and there is no hardware roofline.

Examples
--------
>>> report = iris.perf.compare(ctx, {"mine": lambda: my_kernel[grid](...), "torch": lambda: torch.mm(a, b)},
...                            flops=2 * m * n * k, bytes=2 * (m * k + k * n + m * n))     # doctest: +SKIP
>>> print(report)                                                                            # doctest: +SKIP
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field

import torch

from ..base import gpu_specs as specs
from ..instruments.replay import TIMED_MS, ReplayTiming, capture, every_rank_us, everyone, replay_time
from ..runtime.timing import do_bench
from . import ceilings as ceilings_module
from .errors import PerfError
from .placement import shared_groups, sharing_message, this_gpu
from .roofline import Roof, intensity, share_of_roof

GRAPH_US = 1000.0  # calls per graph: enough that one replay lasts about this long (graph launch amortised) ...
MAX_CALLS = 20  # ... up to this many
CPU_REPEAT = 5  # timed calls per candidate on the interpreter (seconds each for a large kernel)
GPU_ERROR = re.compile(r"cuda|nccl|\bgpu\b", re.IGNORECASE)


@dataclass(frozen=True)
class CandidateResult:
    """One candidate's measurement.

    Attributes
    ----------
    label : str
    time_us : float
        µs per call, the slowest rank's.
    per_rank_us : tuple of float
        Each rank's µs per call.
    mode : str
        ``"graph"`` (CUDA-graph replays), ``"eager"`` (a host loop of calls; ``why`` says why) or
        ``"interpreter"`` (the CPU backend: the Triton interpreter's time, nothing about a GPU).
    tflops, gbs, peer_gbs : float or None
        Achieved TFLOP/s, memory GB/s and GB/s on each peer link, where the work was declared.
    intensity : float or None
        flops per byte of memory traffic: where the candidate sits on the roofline.
    of_spec, of_measured : dict
        Fractions of the spec sheet's and of the measured ceilings: keys ``"compute"`` (TFLOP/s of the peak),
        ``"memory"`` (GB/s of the memory bandwidth), ``"peer"`` (of a link's), ``"roof"`` (TFLOP/s of what the
        roofline allows at this intensity), each present when both sides are known.
    """

    label: str
    time_us: float
    per_rank_us: tuple
    mode: str
    why: str | None = None
    tflops: float | None = None
    gbs: float | None = None
    peer_gbs: float | None = None
    intensity: float | None = None
    of_spec: dict = field(default_factory=dict)
    of_measured: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PerfReport:
    """What :func:`compare` measured: a row per candidate, and the roofs they are judged against.

    Examples
    --------
    >>> report["mine"].time_us, report["mine"].of_measured.get("roof")     # doctest: +SKIP
    (61.2, 0.83)
    >>> [roof.label for roof in report.roofs()]                             # doctest: +SKIP
    ['H200 SXM spec', 'measured']
    """

    backend: str
    device: str
    num_ranks: int
    dtype: str
    results: tuple
    spec: specs.GpuSpec | None = None
    ceilings: ceilings_module.Ceilings | None = None
    notes: tuple = ()

    def __getitem__(self, label: str) -> CandidateResult:
        for result in self.results:
            if result.label == label:
                return result
        raise KeyError(f"no candidate {label!r}: the report has {[r.label for r in self.results]}")

    def roofs(self) -> list[Roof]:
        """The spec roof (dense peak of the report's dtype, HBM bandwidth) and the measured roof, where known."""
        roofs = []
        if self.spec is not None and self.spec.peak(self.dtype) is not None:
            roofs.append(Roof(f"{self.spec.name} spec", self.spec.peak(self.dtype), self.spec.hbm_gbs))
        if self.ceilings is not None:
            roofs.append(Roof("measured", self.ceilings.matmul_tflops, self.ceilings.copy_gbs))
        return roofs

    def __str__(self) -> str:
        lines = [f"{self.num_ranks} ranks, {self.backend} ({self.device}), {self.dtype}"]
        lines += [f"  note: {note}" for note in self.notes]
        lines.append(f"  {'candidate':<24} {'µs':>10} {'timed':>11} {'TFLOP/s':>9} {'GB/s':>9} {'peer GB/s':>9} "
                     f"{'% spec roof':>11} {'% measured':>10}")
        for r in self.results:
            cells = [_number(r.tflops), _number(r.gbs), _number(r.peer_gbs), _percent(_binding(r.of_spec)),
                     _percent(_binding(r.of_measured))]
            lines.append(f"  {r.label:<24} {r.time_us:>10.1f} {r.mode:>11} {cells[0]:>9} {cells[1]:>9} "
                         f"{cells[2]:>9} {cells[3]:>11} {cells[4]:>10}")
        return "\n".join(lines)


def _number(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _percent(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _binding(shares: dict) -> float | None:
    """The share that says how far the candidate is from its roof: the roofline's when both flops and bytes are
    known, else the largest of the others (the resource nearest its limit)."""
    if "roof" in shares:
        return shares["roof"]
    return max(shares.values(), default=None)


def compare(ctx, candidates: dict, flops=None, bytes=None, peer_bytes=None, graph="auto",  # noqa: A002
            n_warmup: int = 2, n_repeat: int | None = None, preamble=None, *, dtype=torch.bfloat16,
            timed_ms: float = TIMED_MS, measure_ceilings: bool = True, allow_shared_gpu: bool = False) -> PerfReport:
    """Time every candidate on every rank in step and report its time, throughput and share of the roof.

    Collective: every rank calls it with the same labels and numbers (checked: the rank that differs is named).
    A candidate that raises is reported on every rank; one that raises on one rank while the others wait inside a
    collective it never joins leaves them waiting (the workbench interrupts such a cell at its timeout).

    Parameters
    ----------
    ctx : iris.Iris
    candidates : dict
        Label -> zero-argument callable, timed in this order.
    flops, bytes, peer_bytes : int or dict, optional
        The work of one call (one number for every candidate, or a dict by label): floating-point operations,
        bytes of memory traffic (read + written), bytes sent over each peer link.
    graph : {"auto", True, False}
        ``"auto"``: CUDA-graph replays where every rank can capture the call, an eager loop otherwise;
        True: a call that cannot be captured is an error; False: eager.
    n_warmup : int
        Untimed calls before timing, where each call is timed on its own (a preamble, or the CPU backend).
    n_repeat : int, optional
        Timed replays (GPU) or calls (CPU; default 5); on a GPU default as many as fill ``timed_ms``.
    preamble : callable, optional
        Called before every timed call, untimed (reset what a call consumes). Each call is then timed on its
        own with :func:`iris.do_bench` (a barrier, the preamble and an L2 flush before each), replaying a
        captured graph where it can.
    dtype : torch.dtype
        The dtype of the work: which spec peak and measured matmul the TFLOP/s are judged against.
    timed_ms : float
        On a GPU without ``n_repeat``: replay for about this long.
    measure_ceilings : bool
        Measure (or take from this process's cache) the ceilings of :func:`iris.perf.ceilings.measure`.
    allow_shared_gpu : bool
        Time even when ranks share a GPU (a correctness-only run: the report says the times mean nothing).

    Returns
    -------
    PerfReport

    Raises
    ------
    PerfError
        A candidate that failed on some rank (naming the ranks, the label and the error), numbers that differ
        between ranks, a GPU-only candidate on the CPU backend, ranks sharing a GPU.

    Examples
    --------
    >>> report = compare(ctx, {"iris": lambda: ctx.ccl.all_reduce(out, inp),
    ...                        "NCCL": lambda: dist.all_reduce(x, group=nccl)}, bytes=2 * inp.nbytes)  # doctest: +SKIP
    """
    if graph not in ("auto", True, False):
        raise PerfError(f"rank {ctx.cur_rank}: graph={graph!r}: use 'auto', True or False")
    if not isinstance(candidates, dict) or not candidates:
        raise PerfError(f"rank {ctx.cur_rank}: candidates must be a non-empty dict label -> callable, "
                        f"got {type(candidates).__name__}")
    group = ctx.group.group
    declared = {"flops": flops, "bytes": bytes, "peer_bytes": peer_bytes}
    check_same_everywhere(ctx, group, {  # first: whatever is wrong with them below is then wrong on every rank
        "labels": list(candidates), **declared, "graph": graph, "dtype": str(dtype),
        "preamble": preamble is not None, "n_repeat": n_repeat, "n_warmup": n_warmup,
        # these pick collectives (ceilings, the refusal of shared GPUs): a rank that differs would wait alone
        "measure_ceilings": measure_ceilings, "allow_shared_gpu": allow_shared_gpu})
    work = {name: per_label(value, candidates, name, ctx.cur_rank) for name, value in declared.items()}
    not_callable = {label: type(fn).__name__ for label, fn in candidates.items() if not callable(fn)}
    said = [f"rank {rank}: candidate {label!r} is a {kind}, not a callable"
            for rank, theirs in enumerate(everyone(not_callable, group)) for label, kind in theirs.items()]
    if said:  # raised on every rank, so that none waits in the first call for one that stopped
        raise PerfError("; ".join(said) + ": pass zero-argument functions, e.g. lambda: kernel[grid](...)")
    device, spec, ceilings, notes = roofs_here(ctx, group, dtype, measure_ceilings, allow_shared_gpu)
    results = []
    for label, fn in candidates.items():
        first_call(ctx, group, label, fn, preamble)
        timing, mode = _time(ctx, group, label, fn, ctx.backend == "cuda", graph, n_warmup, n_repeat, preamble,
                             timed_ms)
        results.append(judge(label, timing, mode, {k: v[label] for k, v in work.items()}, spec, ceilings, dtype))
    return PerfReport(ctx.backend, device, ctx.num_ranks, str(dtype).removeprefix("torch."), tuple(results),
                      spec, ceilings, tuple(notes))


def roofs_here(ctx, group, dtype, measure_ceilings: bool, allow_shared_gpu: bool):
    """(device name, spec or None, ceilings or None, notes) of this machine; refuses ranks sharing a GPU unless
    allowed. Collective."""
    if ctx.backend != "cuda":
        return "Triton interpreter", None, None, [
            "CPU backend: times are the Triton interpreter's (each program run in turn on the CPU), not a GPU's; "
            "no hardware roofline"]
    notes = []
    shared = shared_groups(everyone(this_gpu(ctx), group))
    if shared and not allow_shared_gpu:
        raise PerfError(f"rank {ctx.cur_rank}: " + sharing_message(shared, "timing"))
    if shared:
        notes.append(sharing_message(shared, "times are not meaningful").split(". Start")[0])
    device = torch.cuda.get_device_name(ctx.get_device())
    spec = specs.find(device)
    if spec is None:
        notes.append(f"no spec sheet for {device}: shares are of the measured ceilings only")
    measurable = dtype in ceilings_module.MATMUL_DTYPES
    ceilings = ceilings_module.measure(ctx, dtype) if measure_ceilings and not shared and measurable else None
    if ceilings is not None:
        notes.append(ceilings.describe())
    elif measure_ceilings and not measurable:
        notes.append(f"no measured ceilings for {dtype} (torch.mm has no such matmul): shares are of the spec only")
    return device, spec, ceilings, notes


def per_label(value, candidates: dict, name: str, rank: int | None = None) -> dict:
    """{label: number or None} from one number for all candidates or a dict by label (errors name ``rank``)."""
    where = "" if rank is None else f"rank {rank}: "
    if isinstance(value, dict):
        unknown = set(value) - set(candidates)
        if unknown:
            raise PerfError(f"{where}{name} names {sorted(unknown)}, which are not candidates "
                            f"({list(candidates)})")
        return {label: value.get(label) for label in candidates}
    if value is not None and (not isinstance(value, (int, float)) or value < 0):
        raise PerfError(f"{where}{name}={value!r}: give a number >= 0 (per call), or a dict label -> number")
    return dict.fromkeys(candidates, value)


def check_same_everywhere(ctx, group, mine: dict) -> None:
    """Raise on every rank, naming the first rank and field that differ from rank 0's."""
    all_ranks = everyone(mine, group)
    for rank, theirs in enumerate(all_ranks):
        for key, value in theirs.items():
            if value != all_ranks[0][key]:
                raise PerfError(f"rank {ctx.cur_rank}: compare was called with {key}={value!r} on rank {rank} but "
                                f"{all_ranks[0][key]!r} on rank 0: every rank must pass the same candidates and "
                                "numbers (it is a collective)")


def first_call(ctx, group, label: str, fn, preamble) -> None:
    """Call ``fn`` once on every rank (compiling what it launches); raise on every rank if it failed on any."""
    ctx.barrier()
    error = None
    try:
        if preamble is not None:
            preamble()
        fn()
        if ctx.backend == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # reported on every rank below, so that no rank waits for one that failed
        error = f"{type(exc).__name__}: {exc}".strip()
        if ctx.backend != "cuda" and GPU_ERROR.search(error):
            error = (f"it needs a GPU ({error.splitlines()[0]}), and this is the CPU backend, where kernels run "
                     "in the Triton interpreter: leave it out here, or run on GPUs with backend='cuda'")
        else:
            error += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-2:])
    failed = [(rank, e) for rank, e in enumerate(everyone(error, group)) if e is not None]
    if failed:
        said = "\n".join(f"  rank {rank}: {e}" for rank, e in failed)
        raise PerfError(f"candidate {label!r} failed on rank{'s' if len(failed) > 1 else ''} "
                        f"{', '.join(str(r) for r, _ in failed)}:\n{said}")
    ctx.barrier()


def _time(ctx, group, label, fn, on_gpu, graph, n_warmup, n_repeat, preamble, timed_ms):
    """(ReplayTiming, mode) for one candidate."""
    if not on_gpu:
        ms = do_bench(fn, barrier_fn=ctx.barrier, preamble_fn=preamble or (lambda: None), n_warmup=n_warmup,
                      n_repeat=n_repeat or CPU_REPEAT, return_mode="median")
        per_rank = every_rank_us(ms, group)
        return ReplayTiming(max(per_rank), per_rank, False), "interpreter"
    if preamble is not None:
        return _time_with_preamble(ctx, group, label, fn, graph, n_warmup, n_repeat, preamble)
    calls = max(everyone(_calls_per_graph(fn), group))
    timing = replay_time(fn, calls, timed_ms, group=group, graph=graph is not False, n_repeat=n_repeat)
    if graph is True and not timing.captured:
        raise PerfError(f"candidate {label!r} could not be captured in a CUDA graph ({timing.why_eager}), and "
                        "graph=True was asked: pass graph='auto' to time it eagerly")
    return timing, "graph" if timing.captured else "eager"


def _calls_per_graph(fn) -> int:
    """Calls per graph so that a replay lasts about ``GRAPH_US``, from one eager call's time."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return max(1, min(MAX_CALLS, int(GRAPH_US / max(start.elapsed_time(end) * 1e3, 1e-3))))


def _time_with_preamble(ctx, group, label, fn, graph, n_warmup, n_repeat, preamble):
    """Each call timed on its own with :func:`iris.do_bench` (preamble untimed before it), a graph replay where
    every rank could capture one call."""
    replay, why = capture(fn, 1) if graph is not False else (None, "graph=False was asked")
    whys = [(rank, w) for rank, w in enumerate(everyone(why, group)) if w is not None]
    if whys and graph is True:
        raise PerfError(f"candidate {label!r} could not be captured in a CUDA graph ({whys[0][1]} on rank "
                        f"{whys[0][0]}), and graph=True was asked: pass graph='auto' to time it eagerly")
    ms = do_bench(fn if whys else replay, barrier_fn=ctx.barrier, preamble_fn=preamble, n_warmup=n_warmup,
                  n_repeat=n_repeat or 20, return_mode="median")
    per_rank = every_rank_us(ms, group)
    why_eager = (why if graph is False else "; ".join(f"rank {rank}: {w}" for rank, w in whys)) if whys else None
    return ReplayTiming(max(per_rank), per_rank, not whys, why_eager), "eager" if whys else "graph"


def judge(label, timing: ReplayTiming, mode, work: dict, spec, ceilings, dtype) -> CandidateResult:
    """Throughputs from the declared work, and their shares of the spec and measured roofs."""
    seconds = timing.us * 1e-6
    tflops = work["flops"] / seconds / 1e12 if work["flops"] is not None else None
    gbs = work["bytes"] / seconds / 1e9 if work["bytes"] is not None else None
    peer_gbs = work["peer_bytes"] / seconds / 1e9 if work["peer_bytes"] is not None else None
    at = intensity(work["flops"], work["bytes"])
    of_spec, of_measured = {}, {}
    if mode != "interpreter":
        if spec is not None:
            _shares(of_spec, tflops, gbs, peer_gbs, at, spec.peak(dtype), spec.hbm_gbs, spec.peer_gbs)
        if ceilings is not None:
            _shares(of_measured, tflops, gbs, peer_gbs, at, ceilings.matmul_tflops, ceilings.copy_gbs,
                    ceilings.peer_gbs)
    return CandidateResult(label, timing.us, timing.per_rank_us, mode, timing.why_eager, tflops, gbs, peer_gbs, at,
                           of_spec, of_measured)


def _shares(into: dict, tflops, gbs, peer_gbs, at, peak, bandwidth, peer) -> None:
    for key, achieved, ceiling in (("compute", tflops, peak), ("memory", gbs, bandwidth), ("peer", peer_gbs, peer)):
        if achieved is not None and ceiling:
            into[key] = achieved / ceiling
    if at is not None and peak and bandwidth:
        into["roof"] = share_of_roof(tflops, Roof("", peak, bandwidth), at)
