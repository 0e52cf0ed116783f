"""BenchView: what :func:`iris.perf.compare` measured, drawn: a table, the roofline with each candidate on it, and
the times of every rank.

The roofline is log-log, arithmetic intensity (flops per byte of memory traffic) against TFLOP/s: the spec
sheet's roof solid, the roof measured on the spot dashed, each candidate a point where it declared both flops and
bytes. Where none declared flops (a copy, a collective), each candidate's GB/s is a bar against the ceilings
instead: the peer link's (spec solid, measured peer copy dashed) where peer bytes were declared, else the
memory's. Beside it, each candidate's time: a bar for the slowest rank, a tick per rank. On the CPU backend there is
no roof to draw, and the times are the interpreter's: the view says so.

Examples
--------
>>> view = workbench.bench({"mine": "mine", "NCCL": "nccl"}, bytes=2 * n * 2)     # doctest: +SKIP
>>> view.report["mine"].of_measured                                             # doctest: +SKIP
{'memory': 0.81}
"""

from __future__ import annotations

import html
import io

import ipywidgets as widgets
from matplotlib.figure import Figure

from iris.base.tables import html_table

from .static import StaticForm

DPI = 90
COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
ROOF_STYLES = {"measured": "--"}  # the spec roof solid, the measured one dashed


class BenchView(StaticForm, widgets.VBox):
    """A :class:`iris.perf.PerfReport` as a header, a table and a picture (all in the static form too).

    Parameters
    ----------
    report : iris.perf.PerfReport
    expressions : dict
        Label -> the expression each rank evaluated (shown in the table).

    Examples
    --------
    >>> view = BenchView(report, {"mine": "lambda: mine()"})       # doctest: +SKIP
    """

    def __init__(self, report, expressions: dict):
        self.report = report
        self.expressions = expressions
        # up to 945 pixels wide: scaled down where the column is narrower (the static form too), never cut off
        picture = widgets.Image(value=draw(report), format="png", layout=widgets.Layout(max_width="100%"))
        picture.alt = alt_text(report)
        super().__init__([widgets.HTML(header(report)), widgets.HTML(table(report, expressions)), picture])
        self.add_class("iris-bench-view")

    def summary(self) -> str:
        """A headline, then the report's table: what a console or a log shows where no picture can be drawn."""
        fastest = min(self.report.results, key=lambda r: r.time_us)
        return (f"BenchView of {len(self.report.results)} candidates on {self.report.num_ranks} ranks "
                f"({self.report.device}); fastest: {fastest.label} {fastest.time_us:.1f} µs\n{self.report}")


def header(report) -> str:
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in report.notes)
    return (f"<b>bench</b>: {report.num_ranks} ranks, {html.escape(report.backend)} "
            f"({html.escape(report.device)}), {report.dtype}; time per call of the slowest rank"
            + (f"<ul style='margin:2px 0'>{notes}</ul>" if notes else ""))


def _cell(value, fmt: str = "{:.3g}") -> str:
    return "–" if value is None else fmt.format(value)


def _shares(shares: dict) -> str:
    """'roof 83% · memory 80%': each known share, the roofline's first."""
    order = ("roof", "compute", "memory", "peer")
    return " · ".join(f"{key} {shares[key]:.0%}" for key in order if key in shares) or "–"


def table(report, expressions: dict) -> str:
    """The report as an HTML table: one row per candidate, figures right, words left."""
    heads = ["candidate", "µs (slowest rank)", "per rank µs", "timed", "TFLOP/s", "GB/s", "peer GB/s",
             "flop/byte", "of spec", "of measured"]
    rows = []
    for r in report.results:
        timed = r.mode + (f" ({html.escape(r.why)})" if r.why else "")
        rows.append([
            f"<b>{html.escape(r.label)}</b><br><code>{html.escape(expressions.get(r.label, ''))}</code>",
            f"{r.time_us:.1f}", " / ".join(f"{us:.1f}" for us in r.per_rank_us), timed, _cell(r.tflops),
            _cell(r.gbs), _cell(r.peer_gbs), _cell(r.intensity), _shares(r.of_spec), _shares(r.of_measured)])
    return html_table(heads, rows, align="lrrlrrrrll", wrap=(0, 3), css_class="iris-bench-table",
                      row_labels=False)


def alt_text(report) -> str:
    return "; ".join(f"{r.label}: {r.time_us:.1f} µs" for r in report.results)


def draw(report) -> bytes:
    """PNG: the roofline where candidates declared flops and bytes (else, where they declared bytes, their GB/s
    against the link's or the memory's ceilings), and the times per candidate."""
    roofs = report.roofs()
    bandwidth = None if _placed(report) else _bandwidth_ceilings(report)
    two_panels = bool(bandwidth or roofs)
    figure = Figure(figsize=(10.5 if two_panels else 5.5, 3.6), dpi=DPI)
    if bandwidth:
        _bandwidth(figure.add_axes((0.17, 0.14, 0.3, 0.76)), report, *bandwidth)  # room for the labels
    elif roofs:
        _roofline(figure.add_axes((0.07, 0.14, 0.4, 0.76)), report, roofs)
    _times(figure.add_axes((0.62, 0.14, 0.35, 0.76) if two_panels else (0.3, 0.14, 0.65, 0.76)), report)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _placed(report) -> list:
    """The candidates with a point on the roofline: log axes have no place for 0 flops (or none per byte)."""
    return [r for r in report.results if r.intensity and r.tflops]


def _bandwidth_ceilings(report):
    """(what, GB/s attribute, {roof label: GB/s}) for the bandwidth picture: the peer link where a candidate
    declared peer bytes, else the memory where one declared bytes; None where neither or no ceiling is known."""
    peer = any(r.peer_gbs for r in report.results)
    if not peer and not any(r.gbs for r in report.results):
        return None
    ceilings = {}
    if report.spec is not None:
        ceilings[f"{report.spec.name} spec"] = report.spec.peer_gbs if peer else report.spec.hbm_gbs
    if report.ceilings is not None and (report.ceilings.peer_gbs or not peer):
        ceilings["measured"] = report.ceilings.peer_gbs if peer else report.ceilings.copy_gbs
    what = "peer link" if peer else "memory"
    return (what, "peer_gbs" if peer else "gbs", ceilings) if ceilings else None


def _bandwidth(axes, report, what: str, attribute: str, ceilings: dict) -> None:
    """Each candidate's achieved GB/s (a bar) against the ceilings of ``what`` (a vertical line each)."""
    results = list(report.results)
    positions = range(len(results))
    axes.barh(positions, [getattr(r, attribute) or 0.0 for r in results],
              color=[COLOURS[i % len(COLOURS)] for i in positions])
    for label, gbs in ceilings.items():
        axes.axvline(gbs, color="black", linestyle=ROOF_STYLES.get(label, "-"), label=f"{label}: {gbs:.0f} GB/s")
    axes.set_yticks(list(positions), [r.label for r in results], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(f"GB/s over the {what}" + (", one direction" if what == "peer link" else ", read + write"))
    axes.set_title(f"GB/s against the {what}'s ceilings (no flops: no roofline)", fontsize=9)
    axes.legend(fontsize=7, loc="lower right")


def _roofline(axes, report, roofs) -> None:
    placed = _placed(report)
    low = min([r.intensity for r in placed] + [roof.ridge for roof in roofs] + [1.0]) / 4
    high = max([r.intensity for r in placed] + [roof.ridge for roof in roofs]) * 4
    xs = [low * (high / low) ** (i / 200) for i in range(201)]
    for roof in roofs:
        axes.plot(xs, [roof.attainable(x) for x in xs], color="black", linestyle=ROOF_STYLES.get(roof.label, "-"),
                  label=f"{roof.label}: {roof.peak_tflops:.0f} TFLOP/s, {roof.bandwidth_gbs:.0f} GB/s")
    for index, r in enumerate(report.results):  # each candidate's colour as in the time bars
        if r not in placed:
            continue
        axes.plot([r.intensity], [r.tflops], "o", color=COLOURS[index % len(COLOURS)], label=r.label)
    axes.set(xscale="log", yscale="log", xlabel="flops per byte of memory traffic", ylabel="TFLOP/s")
    axes.set_title("roofline" + ("" if placed else " (declare flops > 0 and bytes to place candidates)"), fontsize=9)
    axes.legend(fontsize=7, loc="lower right")


def _times(axes, report) -> None:
    results = list(report.results)
    positions = range(len(results))
    axes.barh(positions, [r.time_us for r in results], color=[COLOURS[i % len(COLOURS)] for i in positions])
    for position, r in zip(positions, results, strict=True):
        axes.plot(r.per_rank_us, [position] * len(r.per_rank_us), "|", color="black", markersize=12)
    axes.set_yticks(list(positions), [f"{r.label} ({r.mode})" for r in results], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("µs per call: bar the slowest rank, ticks each rank")
    axes.set_title("time" + (" (Triton interpreter)" if report.backend != "cuda" else ""), fontsize=9)
