"""The ``%iris`` line magic (start, stop, restart, status, heap, show, remote, bench, timeline) and the
``%%iris_kernel`` cell magic.

Examples
--------
::

    %load_ext workbench
    %iris start -n 4 --backend cpu --heap 64MiB --timeout 60

    %%iris_kernel --ranks 0,1 --timeout 30 --show out
    out = ctx.zeros(16, dtype=torch.float32)
    out.fill_(rank)

    %iris show out                 # every rank's out, side by side
    %iris remote out --rank 1      # rank 1's out as every rank reads it through ctx.as_remote
    %iris heap                     # every rank's heap, allocations named after variables
    %iris bench mine=launch "nccl=lambda: dist.all_reduce(x)" --bytes 2*4096   # times, roofline (a widget)

    %%iris_kernel --check races    # check the cell's kernels for data races (CPU backend), show what was found
    ...

    %%iris_kernel --trace          # trace the cell's kernels (tracing=True in them), then show the timeline
    ...
    %iris timeline                 # that timeline again; --save trace.json writes it for Perfetto

    %%iris_kernel --step           # every CPU rank held before each heap access: step them in any order, watch
    ...                            # the heaps; --replay ORDER takes the steps of a saved order
    %%iris_kernel --traffic        # bytes each rank loaded from, stored to, updated at each heap, shown after
    ...                            # (--traffic one_shot: "one_shot" beside the kernel's name in the title)
    %iris traffic --launch 0 --need 8192   # that matrix again: one launch, beside what the operation needs
    %iris traffic --operation 1    # a training step's collective alone (its row in the per-operation table); the
                                   # collectives named by the iris backend and iris.distributed.name_collectives(model)
    %iris status
    %iris solution 07              # one solution to lesson 07's exercise, folded; --load puts it in the cell
    %iris stop
"""

from __future__ import annotations

import argparse
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import display

from . import exercises, races, session, stepping, tracing, views
from .cluster import BACKENDS
from .hang_report import display_hang
from .report import render_summaries
from .traffic_capture import cell_view as traffic_cell_view
from .traffic_capture import last_view as traffic_last_view
from .traffic_capture import start_recording as start_traffic_recording
from .widgets.static import replace_live_views


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a UsageError instead of exiting the kernel."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage()}")

    def exit(self, status=0, message=None):
        raise UsageError(message or self.format_help())


def _hosts(text: str):
    """``--hosts``: a count (``2``) or host names (``a,b``), for :class:`workbench.cluster.Workbench`'s ``hosts=``."""
    return int(text) if text.isdigit() else [name.strip() for name in text.split(",")]


def _iris_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%iris", description="Manage the workbench's ranks.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    start = commands.add_parser("start", help="start N ranks (stopping the current ones)")
    start.add_argument("-n", type=int, default=4, help="number of ranks (default 4)")
    start.add_argument("--backend", choices=BACKENDS, default="auto")
    start.add_argument("--heap", default="64MiB", help="symmetric heap per rank, e.g. 64MiB (default)")
    start.add_argument("--engines", default="local", help="ipyparallel engine launcher: local, mpi, slurm...")
    start.add_argument("--timeout", type=float, default=60.0, help="default seconds a cell may run (60)")
    start.add_argument("--hosts", type=_hosts, default=None, metavar="K|NAME,NAME...",
                       help="simulate K hosts (or hosts of these names) on this machine, in blocks of consecutive "
                            "ranks: for tests and teaching; real hosts come from --engines mpi/slurm/ssh")
    start.add_argument("--check", choices=("races",), default=None,
                       help="check every cell's kernels for data races (CPU backend) and show them after it")
    for name, text in (("stop", "stop every rank"), ("restart", "stop, then start with the same settings"),
                       ("status", "ranks, pids, hosts, devices"),
                       ("heap", "every rank's heap, allocations named after variables (a widget)"),
                       ("topology", "who reaches whom: rank x rank links, ranks by host, the summary (a widget)")):
        commands.add_parser(name, help=text)
    show = commands.add_parser("show", help="every rank's copy of a tensor, side by side (a widget)")
    show.add_argument("name", help="a variable or expression, e.g. x or x[0]")
    show.add_argument("--reduction", choices=("mean", "maxabs"), default="mean",
                      help="what a block of a large tensor shows: its mean or its value of largest magnitude")
    remote = commands.add_parser("remote", help="a rank's copy of a tensor read through ctx.as_remote (a widget)")
    remote.add_argument("name", help="a variable naming a tensor on the symmetric heap")
    remote.add_argument("--rank", type=int, required=True, help="the rank whose copy every rank reads")
    bench = commands.add_parser("bench", help="time callables on every rank, with the roofline (a widget)")
    bench.add_argument("candidates", nargs="+", metavar="LABEL=EXPR",
                       help="a label and an expression each rank evaluates to a zero-argument callable "
                            "(quote it when it has spaces: \"nccl=lambda: dist.all_reduce(x)\"); EXPR alone is "
                            "its own label")
    for flag, text in (("--flops", "floating-point operations of one call"),
                       ("--bytes", "bytes of memory traffic of one call"),
                       ("--peer-bytes", "bytes one call sends over each peer link")):
        bench.add_argument(flag, help=text + " (a Python expression of the notebook, e.g. 2*4096**3)")
    bench.add_argument("--graph", choices=("auto", "on", "off"), default="auto",
                       help="CUDA-graph replays where the calls can be captured (auto), always (on) or never (off)")
    bench.add_argument("--timeout", type=float, default=None, help="seconds before the ranks are interrupted")
    timeline = commands.add_parser("timeline", help="when each rank did what in the last traced cell (a widget)")
    timeline.add_argument("--save", metavar="FILE", help="also write the merged trace (Perfetto JSON) to FILE")
    solution = commands.add_parser("solution", help="one solution to a lesson's exercise, folded (run where no one "
                                                    "reads: nbconvert --execute)")
    solution.add_argument("lesson", help="the lesson's number, e.g. 07")
    shown = solution.add_mutually_exclusive_group()
    shown.add_argument("--load", action="store_true", help="put it into the cell, as %%load does, to run")
    shown.add_argument("--run", action="store_true", help="print it and run it")
    traffic = commands.add_parser("traffic", help="the bytes each rank moved at each heap in the last "
                                                  "--traffic cell (a widget)")
    traffic.add_argument("--launch", type=int, default=None, help="one launch (0: each rank's first; default: all)")
    traffic.add_argument("--need", default=None, metavar="BYTES",
                         help="the bytes the operation must move across ranks (a Python expression of the notebook, "
                              "e.g. iris.traffic.minimum.all_gather(4096,2), without spaces or quoted)")
    traffic.add_argument("--label", default="", help="what to call it in the title, beside the kernel's name "
                                                    "(e.g. which variant ran)")
    traffic.add_argument("--operation", default=None, metavar="K",
                         help="one named operation of a training step: its number in the per-operation table, or its "
                              "label (quoted)")
    return parser


def _kernel_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%%iris_kernel", description="Run the cell on the ranks.")
    parser.add_argument("--ranks", default="all", help="e.g. 0,2 or 1-3 or all (default)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before ranks are interrupted")
    parser.add_argument("--show", nargs="+", default=[], metavar="NAME",
                        help="summarise these variables and refresh (or display) their views")
    parser.add_argument("--trace", action="store_true",
                        help="trace the cell's kernels on every rank (they initialise their device context with "
                             "tracing=True) and show the timeline after it")
    parser.add_argument("--max-events", type=int, default=None, metavar="N",
                        help="trace buffer capacity per rank with --trace (default 1000000)")
    parser.add_argument("--check", choices=("races",), default=None,
                        help="check the cell's kernels for data races (CPU backend; the checker stays on) and show "
                             "the races after it, or say there were none")
    parser.add_argument("--step", action="store_true",
                        help="run the cell on every CPU rank with each rank held before every access to a symmetric "
                             "heap, and show the stepper: step the ranks in any order, watch the heaps, save the order")
    parser.add_argument("--replay", default=None, metavar="ORDER",
                        help="with --step: take the steps of a saved order (a file written by the stepper's save)")
    parser.add_argument("--traffic", nargs="?", const="", default=None, metavar="LABEL",
                        help="count the bytes each rank's launches loaded from, stored to and atomically updated at "
                             "each heap (CPU: exact; CUDA: from tracing) and show the matrix after the cell, LABEL "
                             "beside the kernel's name in its title (e.g. which variant ran)")
    return parser


def parse_ranks(spec: str, world_size: int) -> list[int] | None:
    """``"all"`` -> None (every rank), ``"0,2-3"`` -> ``[0, 2, 3]``; a UsageError for anything else."""
    if spec.strip().lower() == "all":
        return None
    ranks = set()
    try:
        for part in spec.split(","):
            low, _, high = part.strip().partition("-")
            ranks.update(range(int(low), int(high or low) + 1))
    except ValueError:
        raise UsageError(f"--ranks {spec!r}: write ranks like 0,2 or 1-3 or all") from None
    bad = sorted(r for r in ranks if not 0 <= r < world_size)
    if bad or not ranks:
        raise UsageError(f"--ranks {spec!r}: ranks {bad} do not exist; the ranks are 0..{world_size - 1}")
    return sorted(ranks)


def show_variables(wb, names, ranks) -> None:
    """The ``--show`` hook: print a per-rank summary of each variable, then refresh its live views in place
    (or display a BufferView where none is on the page: see :func:`workbench.widgets.registry.after_cell`)."""
    from .widgets import registry

    for name in names:
        print(render_summaries(name, wb.summaries(name, ranks)))
    registry.after_cell(wb, names)


@magics_class
class IrisMagics(Magics):
    """``%iris`` and ``%%iris_kernel``; registered by ``%load_ext workbench``."""

    @line_magic
    def iris(self, line: str):
        """Manage and look at the ranks: ``%iris start -n N [--backend auto|cpu|cuda] [--heap SIZE]
        [--engines LAUNCHER] [--timeout S] [--check races] [--hosts K]``, ``%iris stop``, ``%iris restart``,
        ``%iris status``,
        ``%iris heap``, ``%iris show NAME [--reduction mean|maxabs]``, ``%iris remote NAME --rank R``,
        ``%iris bench LABEL=EXPR ... [--flops F] [--bytes B] [--peer-bytes P] [--graph auto|on|off]``,
        ``%iris timeline [--save FILE]``, ``%iris traffic [--launch K] [--need BYTES] [--label TEXT]``,
        ``%iris solution NN [--load | --run]``."""
        args = _iris_parser().parse_args(shlex.split(line))
        if args.command == "solution":  # needs no ranks to show; run, it uses them as any cell does
            exercises.show_solution(self.shell, args.lesson, "load" if args.load else "run" if args.run else "auto")
            return
        if args.command == "start":
            wb = session.start(n=args.n, backend=args.backend, heap_size=args.heap, engines=args.engines,
                                 timeout=args.timeout, check=args.check, hosts=args.hosts)
            print(wb.status())
            return
        wb = session.current()
        if args.command == "stop":
            print(wb.stop())
            # The views' buttons and sliders need the ranks: each view leaves its static form in its place, which a
            # notebook saved now shows when reopened (no widget model to look for then). Only where a frontend draws
            # widgets (a kernel's): a terminal's IPython would print every view's line again.
            if getattr(self.shell, "kernel", None) is not None:
                replace_live_views()
        elif args.command == "restart":
            wb.restart()
            if wb.last_stop.engines:  # not after %iris stop, which said how that went
                print(wb.last_stop)
            print(wb.status())
        elif args.command == "status":
            print(wb.status())
        elif args.command == "heap":
            display(views.heap())
        elif args.command == "topology":
            display(views.topology())
        elif args.command == "show":
            display(views.show(args.name, reduction=args.reduction))
        elif args.command == "remote":
            display(views.remote(args.name, args.rank))
        elif args.command == "bench":
            display(self._bench(args))
        elif args.command == "timeline":
            view = tracing.timeline_view(wb, filename=args.save)
            if args.save:
                print(f"wrote the merged trace to {args.save}: open it at https://ui.perfetto.dev")
            display(view)
        elif args.command == "traffic":
            operation = int(args.operation) if args.operation and args.operation.isdigit() else args.operation
            display(traffic_last_view(self._need(args.need), args.launch, args.label, operation))

    def _stepped(self, wb, cell: str, args, ranks):
        """``%%iris_kernel --step [--replay ORDER]``: the :class:`~workbench.stepping.SteppedRun`, every rank held at
        its first heap access (the cell's value: shown as the stepper view; ``_`` in the next cell)."""
        others = [flag for flag, given in (("--ranks", ranks is not None), ("--trace", args.trace),
                                           ("--check", args.check), ("--traffic", args.traffic is not None),
                                           ("--show", args.show), ("--timeout", args.timeout is not None)) if given]
        if others:
            raise UsageError(f"%%iris_kernel --step runs the cell on every rank, held at each heap access, for as long "
                             f"as you step it: leave out {', '.join(others)}")
        if args.replay and not args.step:
            raise UsageError("%%iris_kernel --replay ORDER replays a stepped run: add --step")
        run = stepping.start_stepping(wb, cell, line_offset=1)
        if args.replay:
            run.replay(args.replay)
        return run  # the cell's value: displayed as the stepper, and the notebook's ``_`` reaches the run

    def _bench(self, args):
        """``%iris bench``'s view: LABEL=EXPR pairs, the work's numbers evaluated in the notebook's namespace."""
        candidates = {}
        for item in args.candidates:
            label, equals, expression = item.partition("=")
            # "x==y" or "f(a=1)" carry no label: an "=" of a comparison or inside brackets is the expression's.
            if not equals or not label.strip() or expression.startswith("=") or any(c in label for c in "([{'\""):
                label, expression = item, item
            candidates[label.strip()] = expression.strip()
        work = {}
        for name in ("flops", "bytes", "peer_bytes"):
            text = getattr(args, name)
            if text is not None:
                try:
                    work[name] = int(eval(text, self.shell.user_ns))
                except Exception as exc:
                    raise UsageError(f"%iris bench --{name.replace('_', '-')} {text!r}: {type(exc).__name__}: "
                                     f"{exc}; give a number or an expression of the notebook's") from None
        return views.bench(candidates, **work, graph={"auto": "auto", "on": True, "off": False}[args.graph],
                               timeout=args.timeout)

    def _need(self, text):
        """``--need``: bytes or a (world, world) matrix, evaluated in the notebook's namespace."""
        if text is None:
            return None
        try:
            return eval(text, self.shell.user_ns)
        except Exception as exc:
            raise UsageError(f"%iris traffic --need {text!r}: {type(exc).__name__}: {exc}; give a number of bytes "
                             "or an expression of the notebook's, e.g. iris.traffic.minimum.all_gather(4096,2)"
                             ) from None

    @cell_magic
    def iris_kernel(self, line: str, cell: str):
        """Run the cell on every rank (or ``--ranks``), each in its own namespace holding ``ctx``, ``rank``,
        ``world_size``, ``iris``, ``torch``, ``triton``, ``tl``, ``gluon``, ``gl``, ``DeviceContext``,
        ``IrisDeviceCtx`` and ``TraceEvent``. Ranks still running after ``--timeout`` seconds are interrupted.
        ``--trace`` captures the events of the cell's traced kernels and shows the timeline after the cell;
        ``--check races`` checks its kernels for data races and shows them (so does every cell of ranks started
        with ``--check races``, when there are some); ``--traffic [LABEL]`` counts the bytes its launches moved at
        each rank's heap and shows the matrix after the cell, titled with the kernel's name and LABEL."""
        args = _kernel_parser().parse_args(shlex.split(line))
        if args.max_events is not None and not args.trace:
            raise UsageError("%%iris_kernel: --max-events sizes the trace buffers of --trace: add --trace")
        if args.max_events is not None and args.max_events < 1:
            raise UsageError(f"%%iris_kernel: --max-events {args.max_events}: give at least 1 event per rank")
        wb = session.current()
        ranks = parse_ranks(args.ranks, wb.world_size)
        if args.step or args.replay:
            return self._stepped(wb, cell, args, ranks)
        if args.trace:
            tracing.start_capture(wb, args.max_events or tracing.DEFAULT_MAX_EVENTS, ranks=ranks)
        if args.check == "races" and wb.check != "races":
            races.start_checking(wb)
            wb.check = "races"
        if args.traffic is not None:
            start_traffic_recording(wb, ranks=ranks)
        # One blank line stands for the magic's own line, so tracebacks count lines as the notebook does.
        report = wb.run(cell, ranks=ranks, timeout=args.timeout, line_offset=1)
        display_hang(report)  # a timed-out cell's hang report: where each rank was (HTML table, text fallback)
        # Races first: a race may be why the cell failed. Not after a timeout or a death: ranks are not idle.
        idle = all(r.status in ("ok", "error") for r in report.results.values())
        if wb.check == "races" and idle:
            found = races.cell_races(wb)
            if found or args.check:
                display(found)
        traffic_view = None
        if args.traffic is not None and idle:
            traffic_view = traffic_cell_view(wb, ranks=ranks, label=args.traffic)
        report.raise_on_failure()
        print(report.render())
        if args.show:
            show_variables(wb, args.show, ranks)
        if args.trace:
            display(tracing.timeline_view(wb, ranks=ranks))
        if traffic_view is not None:
            display(traffic_view)
