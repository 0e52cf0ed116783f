"""Write a benchmark's table into benchmarks/RESULTS.md, one section per benchmark, replaced on each run.

Examples
--------
>>> write_section("rma_bandwidth", "| size | GB/s |\\n|---|---|\\n| 1 MiB | 300 |")   # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import platform
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
_HEADER = (
    "# Benchmark results\n\n"
    "Each section is written by the benchmark named in its title, which runs its baseline in the same run.\n"
)


def environment() -> str:
    """One line naming the device, the software versions and the date."""
    import torch
    import triton

    if torch.cuda.is_available():
        names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
        device = f"{torch.cuda.device_count()}x {', '.join(names)}"
    else:
        device = f"CPU {platform.processor() or platform.machine()}"
    return (f"{device}; torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}; "
            f"{datetime.date.today().isoformat()}")


def write_section(name: str, body: str) -> Path:
    """Replace (or append) the section ``## name`` of RESULTS.md with ``body``."""
    text = RESULTS.read_text() if RESULTS.exists() else _HEADER
    section = f"## {name}\n\n{body.strip()}\n\n"
    pattern = re.compile(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    RESULTS.write_text(text)
    return RESULTS


LESSONS_SECTION = "Lessons against torch + NCCL"
LESSON_GOAL = 1.10  # issue 44: a lesson's final kernel takes at most this times its baseline's time


def steps_table(lesson: str, rows: dict, baseline: str, final: str) -> list[str]:
    """A lesson's steps as the lines of a table, then issue 44's goal for its final kernel, met or missed.

    Parameters
    ----------
    lesson : str
        The lesson's number, e.g. "11".
    rows : dict
        ``{step or baseline: (µs per call, captured)}``, in the table's order; captured False: an eager loop.
    baseline : str
        The row every ratio is taken to (what a practitioner would call instead).
    final : str
        The row of the lesson's final kernel, judged against :data:`LESSON_GOAL`.

    Examples
    --------
    >>> steps_table("12", {"gather + SDPA": (40.0, True), "ours": (20.0, True)}, "gather + SDPA", "ours")[-1]
    "Goal (issue 44): the lesson's final kernel, ours, at most 1.10x gather + SDPA: **met** (0.50x)."
    """
    base = rows[baseline][0]
    lines = [f"| lesson {lesson} | µs | / {baseline} | timed as |", "|---|---|---|---|"]
    lines += [f"| {name} | {us:.1f} | {us / base:.2f} | {'CUDA graph' if captured else 'eager loop'} |"
              for name, (us, captured) in rows.items()]
    ratio = rows[final][0] / base
    return lines + ["", f"Goal (issue 44): the lesson's final kernel, {final}, at most {LESSON_GOAL:.2f}x {baseline}: "
                        f"**{'met' if ratio <= LESSON_GOAL else 'missed'}** ({ratio:.2f}x)."]


def write_lesson_block(lesson: str, script: str, lines: list[str], world: int) -> Path:
    """Replace (or add) lesson ``lesson``'s block at ``world`` ranks in the section :data:`LESSONS_SECTION`, keeping
    other lessons' and other world sizes'.

    Each lesson's benchmark writes its own block per world size, between ``<!-- lesson NN at W ranks begin
    (script) -->`` and ``<!-- lesson NN at W ranks end -->``, so that one run leaves the other figures as they were.

    Examples
    --------
    >>> write_lesson_block("13", "benchmarks/lesson13_steps.py", ["| step | µs |", "|---|---|"], 4)  # doctest: +SKIP
    """
    begin, end = f"<!-- lesson {lesson} at {world} ranks begin", f"<!-- lesson {lesson} at {world} ranks end -->"
    block = f"{begin} ({script}) -->\n" + "\n".join(lines) + f"\n{end}"
    text = RESULTS.read_text() if RESULTS.exists() else _HEADER
    match = re.search(rf"^## {re.escape(LESSONS_SECTION)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    body = match.group(1) if match else ""
    if begin in body:
        body = re.sub(rf"{re.escape(begin)}.*?{re.escape(end)}", lambda _: block, body, flags=re.S)
    else:
        body = body + "\n" + block
    return write_section(LESSONS_SECTION, body)
