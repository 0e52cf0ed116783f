"""Stale-kernel guard: a clear error for launching a kernel decorated before the interpreter was on.

Why: ``TRITON_INTERPRET`` is read when ``@triton.jit`` / ``@gluon.jit`` decorate, not at launch. A
kernel decorated before ``import iris`` switched Triton to the CPU interpreter is a compiled-path
``JITFunction``; launching it on a machine without a GPU fails deep in triton/runtime/driver.py with
"0 active drivers ([]). There should only be one.", which says nothing about the cause or the cure.
"""

import functools

import triton
from triton.runtime.jit import JITFunction

from ..base.patching import replace_once


def stale_kernel_message(kernel):
    """Explain why ``kernel`` cannot be launched and what to do.

    Parameters
    ----------
    kernel : triton.runtime.jit.JITFunction

    Returns
    -------
    str

    Examples
    --------
    >>> print(stale_kernel_message(my_old_kernel))  # doctest: +SKIP
    Kernel 'my_old_kernel' (defined at notebook-cell-3.py:1) was decorated with @triton.jit before ...
    """
    code = kernel.fn.__code__
    decorator = "@gluon.jit" if kernel.is_gluon() else "@triton.jit"
    return (
        f"Kernel {kernel.fn.__qualname__!r} (defined at {code.co_filename}:{code.co_firstlineno}) was "
        f"decorated with {decorator} before `import iris` switched Triton to the CPU interpreter "
        "(TRITON_INTERPRET=1), so it was built for the GPU compiler and cannot run here. "
        "Import iris (or set TRITON_INTERPRET=1) before defining kernels, or re-run the cell or "
        "module that defines this kernel."
    )


def _refusing_stale_launches(launch):
    @functools.wraps(launch)
    def run(self, *args, **kwargs):
        if triton.knobs.runtime.interpret:
            raise RuntimeError(stale_kernel_message(self))
        return launch(self, *args, **kwargs)

    return run


def install():
    """Make ``JITFunction.run`` raise :func:`stale_kernel_message` while the interpreter is on."""
    replace_once(JITFunction, "run", _refusing_stale_launches)
