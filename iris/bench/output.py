"""Results as text: upstream Iris's console table, JSON records and CSV rows, with the same columns and keys.

Console: one table per benchmark, its axis columns, then ``GPU Time (ms)``, ``BW (GB/s)`` (when bytes were
declared), ``TFLOPS`` (when FLOPs were) and the benchmark's counters. JSON: one record per point
(``benchmark``, ``world_size``, ``params``, ``gpu_time_ms``, ``all_times_ms``, then ``bandwidth_gbps``,
``tflops``, ``counters``, ``skipped``/``skip_reason`` where they apply). CSV: one row per point.

Examples
--------
>>> from iris.bench.state import Result
>>> print(format_console([Result("copy", {"M": 1024}, 0.5, [0.5], bandwidth_gbps=8.0)]).strip())
copy
   M  GPU Time (ms)  BW (GB/s)
1024          0.500        8.0
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable

from .axes import dtype_name
from .state import Result

FORMATS = ("console", "json", "csv")


def _in_first_seen_order(names_per_result) -> list[str]:
    seen: dict[str, None] = {}
    for names in names_per_result:
        seen.update(dict.fromkeys(names))
    return list(seen)


def _by_benchmark(results: list[Result]) -> dict[str, list[Result]]:
    groups: dict[str, list[Result]] = {}
    for result in results:
        groups.setdefault(result.benchmark_name, []).append(result)
    return groups


def _optional(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _console_table(results: list[Result]) -> list[str]:
    params = list(results[0].params)
    columns: list[tuple[str, Callable[[Result], str]]] = [
        (name, lambda r, name=name: dtype_name(r.params[name])) for name in params]
    columns.append(("GPU Time (ms)", lambda r: f"{r.gpu_time_ms:.3f}"))
    if any(r.bandwidth_gbps is not None for r in results):
        columns.append(("BW (GB/s)", lambda r: _optional(r.bandwidth_gbps, 1)))
    if any(r.tflops is not None for r in results):
        columns.append(("TFLOPS", lambda r: _optional(r.tflops, 1)))
    for counter in _in_first_seen_order(r.counters for r in results):
        columns.append((counter, lambda r, c=counter: f"{r.counters[c]:.3f}" if c in r.counters else ""))
    rows = []
    for result in results:
        if result.skipped:
            # The point's first axis value, then the note where the time would be (as upstream shows it).
            note = "(skipped)" + (f" {result.skip_reason}" if result.skip_reason else "")
            lead = [columns[0][1](result)] if params else []
            rows.append(lead + [note] + [""] * (len(columns) - len(lead) - 1))
        else:
            rows.append([cell(result) for _, cell in columns])
    headers = [name for name, _ in columns]
    widths = [max(len(text) for text in column) for column in zip(headers, *rows, strict=False)]
    return ["  ".join(text.rjust(width) for text, width in zip(row, widths, strict=False))
            for row in [headers, *rows]]


def format_console(results: list[Result]) -> str:
    """An aligned table per benchmark, headed by its name (empty text for no results)."""
    if not results:
        return ""
    lines = []
    for name, group in _by_benchmark(results).items():
        lines += ["", name, *_console_table(group)]
    return "\n".join(lines) + "\n"


def format_json(results: list[Result]) -> str:
    """A JSON list with one record per point; dtypes written by name."""
    records = []
    for r in results:
        record = {"benchmark": r.benchmark_name, "world_size": r.world_size,
                  "params": {name: dtype_name(value) for name, value in r.params.items()},
                  "gpu_time_ms": r.gpu_time_ms, "all_times_ms": r.all_times_ms}
        if r.bandwidth_gbps is not None:
            record["bandwidth_gbps"] = r.bandwidth_gbps
        if r.tflops is not None:
            record["tflops"] = r.tflops
        if r.counters:
            record["counters"] = r.counters
        if r.skipped:
            record.update(skipped=True, skip_reason=r.skip_reason)
        records.append(record)
    return json.dumps(records, indent=2) + "\n"


def format_csv(results: list[Result]) -> str:
    """A CSV table with a header row: benchmark, world_size, every axis, time, bandwidth, TFLOPS, counters, skip."""
    if not results:
        return ""
    params = _in_first_seen_order(r.params for r in results)
    counters = _in_first_seen_order(r.counters for r in results)
    fields = ["benchmark", "world_size", *params, "gpu_time_ms", "bandwidth_gbps", "tflops", *counters,
              "skipped", "skip_reason"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    for r in results:
        row = {"benchmark": r.benchmark_name, "world_size": r.world_size,
               "gpu_time_ms": "" if r.skipped else f"{r.gpu_time_ms:.4f}",
               "bandwidth_gbps": _optional(r.bandwidth_gbps, 2), "tflops": _optional(r.tflops, 2),
               "skipped": r.skipped, "skip_reason": r.skip_reason}
        row.update({name: dtype_name(r.params[name]) if name in r.params else "" for name in params})
        row.update({name: f"{r.counters[name]:.4f}" if name in r.counters else "" for name in counters})
        writer.writerow(row)
    return buffer.getvalue()


def format_results(results: list[Result], output_format: str) -> str:
    """``results`` in ``output_format`` (one of :data:`FORMATS`)."""
    formatters = {"console": format_console, "json": format_json, "csv": format_csv}
    return formatters[output_format](results)
