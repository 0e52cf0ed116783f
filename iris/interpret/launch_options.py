"""The CPU interpreter's launch drops upstream Iris's AMD-only launch options with a warning, as a GPU launch does.

Triton's interpreter takes ``waves_per_eu=2`` and the like without a word; a program that runs on the laptop
must say what it says on an NVIDIA GPU (:mod:`iris.base.launch_options`, whose rule this hook applies at
``InterpretedFunction.run``).

Examples
--------
>>> import iris.interpret; iris.interpret.activate()    # installs this hook
"""

from triton.runtime.interpreter import InterpretedFunction

from ..base.launch_options import install_at


def install() -> None:
    """Drop AMD-only options at the interpreter's launch; idempotent."""
    install_at(InterpretedFunction)
