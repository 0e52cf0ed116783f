"""Advice for GPU compile failures that code written for the CPU interpreter or for AMD GPUs meets on NVIDIA.

Triton reports these failures badly: MLIR writes its reason straight to file descriptor 2 and Python gets only
``RuntimeError("PassManager::run failed")`` or ``RuntimeError("error encountered during parsing")``; ptxas's
reason arrives inside a long ``PTXASError``. :func:`layout_hints` captures file descriptor 2 around a block
and, when the block fails with one of the reasons in :data:`HINTS`, raises what to write instead, with the
failing ``file:line:col`` where the compiler gave one. The workbench runs every cell of a GPU rank inside it.

Examples
--------
>>> from iris.language.hints import layout_hints
>>> with layout_hints():
...     copy_kernel[(1,)](src, out, BLOCK=64)      # gl.BlockedLayout([1], [16], [1], [0]) on NVIDIA  # doctest: +SKIP
Traceback (most recent call last):
RuntimeError: kernel.py:12:24: this Gluon layout has 16 threads per warp, but a warp has 32 threads on this GPU ...
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass

from .core import VOLATILE_WITH_CACHE_MODIFIER

LAYOUT_ADVICE = (
    "A Gluon range has no layout: on a GPU write gl.arange(0, BLOCK, layout=gl.CoalescedLayout()) (portable) "
    "or an explicit gl.BlockedLayout([1], [32], [num_warps], [0]) (32-wide warps on NVIDIA, 64 on AMD). "
    "The CPU interpreter ignores layouts, which is why the kernel ran there."
)
WARP_WIDTH_ADVICE = (
    "this Gluon layout has {layout} threads per warp, but a warp has {warp} threads on this GPU (NVIDIA: 32; "
    "AMD: 64, which upstream Iris's Gluon examples assume). Write threads_per_warp {warp}, e.g. "
    "gl.BlockedLayout([1], [{warp}], [num_warps], [0]), or gl.CoalescedLayout() to stay portable across 32- "
    "and 64-wide warps. (The CPU interpreter ignores layouts, so it runs such kernels anyway.)"
)
WARP_COUNT_ADVICE = (
    "this Gluon layout spreads over {layout} warps, but the kernel was launched with num_warps={warps}. Launch "
    "with num_warps={layout} (as upstream Iris's examples do), or write gl.num_warps() for warps_per_cta, or "
    "use gl.CoalescedLayout(), which fits any launch."
)


@dataclass(frozen=True)
class Hint:
    """A compile failure iris recognises: what the compiler reports, and what to write instead.

    ``pattern`` is searched in MLIR's messages, then in the exception's text; ``advice`` is formatted with the
    pattern's named groups, and prefixed with the group ``where`` (``file:line:col``) when there is one.
    """

    pattern: re.Pattern
    advice: str

    def explain(self, match: re.Match) -> str:
        groups = match.groupdict()
        advice = self.advice.format(**groups)
        return f"{groups['where']}: {advice}" if groups.get("where") else advice


# MLIR's diagnostics start "file:line:col: error: " and their reason may run over the next line.
_MLIR_ERROR = r"^(?P<where>\S+:\d+:\d+): error: [^\n]*?\s*"

HINTS = (
    # triton 3.6 to 3.9: a kernel whose layouts are all automatic (gl.arange(0, BLOCK) with no layout).
    Hint(re.compile(_MLIR_ERROR + r"'tt\.make_range' op Failed to infer return type", re.MULTILINE), LAYOUT_ADVICE),
    # A layout whose threads per warp fit no warp of this GPU. An AMD layout (64-wide warps) meets it only where
    # iris.language.warp_width cannot re-express it for NVIDIA's 32-wide warps.
    Hint(re.compile(_MLIR_ERROR + r"Layout has (?P<layout>\d+) threads per warp, but the module specifies "
                    r"(?P<warp>\d+) threads per warp", re.MULTILINE), WARP_WIDTH_ADVICE),
    Hint(re.compile(_MLIR_ERROR + r"Layout has (?P<layout>\d+) warps per CTA, but the context requires "
                    r"(?P<warps>\d+) warps per CTA", re.MULTILINE), WARP_COUNT_ADVICE),
    # A plain tl.load/gl.load (iris's own loads refuse this before compiling:
    # iris.language.core.volatile_load_modifier).
    Hint(re.compile(r"Modifier '\.volatile' cannot be combined with modifier '(?P<modifier>\.\w+)'"),
         VOLATILE_WITH_CACHE_MODIFIER),
)


def advice_for(text: str) -> str | None:
    """The advice for the first failure of :data:`HINTS` reported in ``text``, or None."""
    found = [(match.start(), hint, match) for hint in HINTS if (match := hint.pattern.search(text))]
    if not found:
        return None
    _, hint, match = min(found, key=lambda entry: entry[0])
    return hint.explain(match)


@contextlib.contextmanager
def layout_hints():
    """Turn the GPU compile failures of :data:`HINTS` into advice on what to write instead.

    File descriptor 2 is captured while the block runs (that is where MLIR writes its reasons) and written
    back unchanged afterwards. Any other failure, and every failure on the CPU interpreter, passes through
    untouched.

    Raises
    ------
    RuntimeError
        The advice, chained to the compiler's error, when the block failed for a reason in :data:`HINTS`.

    Examples
    --------
    >>> with layout_hints():
    ...     read_from_peer[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, 1, 64)   # doctest: +SKIP
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except Exception as error:
            failure = error
        else:
            failure = None
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            sys.stderr.write(text)
    if failure is None:
        return
    advice = advice_for(f"{text}\n{failure}")
    if advice is None:
        raise failure
    raise RuntimeError(advice) from failure
