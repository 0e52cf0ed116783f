"""The progress of starting the ranks, and what stays of it in the notebook afterwards.

In a Jupyter kernel the bar is a widget shown under a display id; when the start is over, that output is
replaced by one line of text (``2 ranks ready in 3.1 s``), so a saved or exported notebook (nbconvert's
HTML, GitHub) keeps the outcome rather than a bar frozen at 0%. Elsewhere (a terminal, a script) it is a
tqdm text bar that disappears when done.

Examples
--------
>>> progress = StartProgress(total=5, show=False)
>>> progress.set_description("engines"); progress.update()
>>> progress.finish("2 ranks ready")
"""

from __future__ import annotations

import time


def in_jupyter_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (where outputs can be widgets and can be replaced)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class StartProgress:
    """Steps of a start: ``update()`` after each, ``set_description()`` names the current one, and
    ``finish(message)`` (success) or ``close()`` (failure: the step it stopped at is said) ends it.

    Parameters
    ----------
    total : int
        Steps in all.
    show : bool
        False: nothing is displayed.
    """

    def __init__(self, total: int, show: bool = True):
        self.total, self.done, self.step = total, 0, "starting"
        self.started = time.perf_counter()
        self._widget = self._handle = self._tqdm = None
        if not show:
            return
        if in_jupyter_kernel():
            import ipywidgets as widgets
            from IPython.display import display

            self._widget = widgets.IntProgress(value=0, max=total, description="starting",
                                               style={"description_width": "initial"})
            self._handle = display(self._widget, display_id=True)
        else:
            from tqdm import tqdm

            self._tqdm = tqdm(total=total, desc="starting", unit="step", leave=False)

    def set_description(self, step: str) -> None:
        self.step = step
        if self._widget is not None:
            self._widget.description = step
        if self._tqdm is not None:
            self._tqdm.set_description(step)

    def update(self, steps: int = 1) -> None:
        self.done += steps
        if self._widget is not None:
            self._widget.value = self.done
        if self._tqdm is not None:
            self._tqdm.update(steps)

    def finish(self, message: str) -> None:
        """End a start that succeeded: the bar gives way to ``message`` and the time it took."""
        self._end(f"{message} in {time.perf_counter() - self.started:.1f} s")

    def close(self) -> None:
        """End a start that failed (the error itself is raised by the caller): say where it stopped."""
        self._end(f"the start stopped at step {self.done + 1} of {self.total} ({self.step}) after "
                  f"{time.perf_counter() - self.started:.1f} s")

    def _end(self, line: str) -> None:
        if self._handle is not None:
            self._handle.update({"text/plain": line}, raw=True)
            self._widget.close()
            self._handle = self._widget = None
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
