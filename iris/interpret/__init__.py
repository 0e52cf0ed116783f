"""Run Triton aggregates and Gluon kernels on the Triton CPU interpreter.

CPU only. ``iris/__init__.py`` calls :func:`activate` before anything defines a kernel; on a GPU
machine nothing here runs. This package is the only one that patches Triton's interpreter; it imports nothing of
``iris`` but :mod:`iris.base` (the supported range its errors name, the patching helper, the rule of
:mod:`iris.base.launch_options`, the backend for :func:`kernels_run_on_gpu`).

What :func:`activate` installs, one module each (every module says which triton code it works
around, and why):

* :mod:`.constexpr`: ``constexpr`` annotations count whatever their spelling (``gl.constexpr``...);
* :mod:`.aggregate`: ``@aggregate`` classes keep and bind their jit methods;
* :mod:`.gluon`: ``@gluon.jit`` kernels run, layouts ignored; GPU-only Gluon features raise
  :class:`UnsupportedOnInterpreter`;
* :mod:`.device_calls`: jit helpers made before activation (``gl.sum``, ``gl.zeros``...) run interpreted;
* :mod:`.scalar_index`: ``range(n)`` over a runtime scalar works with numpy >= 2.4 (triton 3.6 needs it);
* :mod:`.lang_once_per_launch`: device-function calls reuse the launch's binding of ``triton.language`` instead of
  redoing it (about half of a kernel's interpreter time);
* :mod:`.clock`: the device clock's inline PTX reads the host's monotonic clock (device tracing);
* :mod:`.guard`: launching a kernel decorated before activation raises a clear ``RuntimeError``;
* :mod:`.number_min_max`: ``tl.minimum``/``tl.maximum`` of a NaN and a number give the number (triton 3.6, 3.7);
* :mod:`.masked_load_other`: a masked lane of a one-element load whose ``other`` is -0.0 reads -0.0 (triton 3.6
  to 3.9);
* :mod:`.float_bits_atomics`: float32/float64 ``atomic_xchg``/``and``/``or``/``xor`` act on the bits, and
  float64 ``atomic_min``/``atomic_max`` return the right old value, as on a GPU;
* :mod:`.atomic_adds`: float16 ``atomic_add`` is atomic across processes, and float32 ``atomic_add`` flushes
  subnormals as a GPU's ``atom.add.f32`` does;
* :mod:`.kernel_errors`: iris's errors raised in a kernel (:class:`.kernel_errors.RaisedAsIs`) reach the caller
  unwrapped;
* :mod:`.launch_options`: AMD-only launch options (``waves_per_eu``...) are dropped with a warning, as on a GPU;
* :mod:`.bf16`: bfloat16 arithmetic, conversions, reductions, ``tl.dot`` and atomics give what a GPU gives
  (the interpreter computes on bf16's raw bits); what it cannot emulate for bf16 raises.

Installed later, by the first observer only: :mod:`.access_events` reports every load, store, atomic, launch and
program to observers (the race checker, :mod:`iris.instruments.checking`).

Examples
--------
>>> import iris.interpret
>>> iris.interpret.activate()   # before defining kernels
>>> iris.interpret.is_active()
True
"""

import os

from .errors import UnsupportedOnInterpreter

__all__ = ["UnsupportedOnInterpreter", "activate", "is_active", "kernels_run_on_gpu"]

_activated = False


def activate():
    """Switch Triton to the CPU interpreter and install the adapter; idempotent.

    Sets ``TRITON_INTERPRET=1`` (read by ``@triton.jit`` when it decorates, so call this before
    kernels are defined), checks that the installed Triton has the internals the adapter patches (see
    :mod:`.version`) and installs the patches once.

    Raises
    ------
    RuntimeError
        When the installed Triton lacks internals the adapter patches; the message says the supported range.

    Examples
    --------
    >>> import iris.interpret
    >>> iris.interpret.activate()
    >>> import triton
    >>> triton.knobs.runtime.interpret
    True
    """
    global _activated
    # Before importing triton, so that even triton's own standard library is made interpreted.
    os.environ["TRITON_INTERPRET"] = "1"
    if _activated:
        return

    import triton

    from . import (
        aggregate,
        atomic_adds,
        bf16,
        clock,
        constexpr,
        device_calls,
        float_bits_atomics,
        gluon,
        guard,
        kernel_errors,
        lang_once_per_launch,
        launch_options,
        masked_load_other,
        number_min_max,
        scalar_index,
        version,
    )

    version.check_triton_internals()
    # triton.knobs reads TRITON_INTERPRET on every access unless a value was assigned to the knob;
    # assign it too, so an earlier ``triton.knobs.runtime.interpret = False`` cannot win.
    triton.knobs.runtime.interpret = True
    # bf16 last: it wraps builder methods (minnumf...) that the modules before it may have replaced.
    # lang_once_per_launch after scalar_index: its probe runs the launch patches as scalar_index leaves them.
    # masked_load_other runs a probe kernel: after the modules that make kernels run (and before bf16, as all).
    for module in (constexpr, aggregate, gluon, device_calls, scalar_index, lang_once_per_launch, number_min_max,
                   float_bits_atomics, atomic_adds, clock, guard, kernel_errors, launch_options, masked_load_other,
                   bf16):
        module.install()
    _activated = True


def is_active():
    """Tell whether :func:`activate` has switched this process to the CPU interpreter.

    Returns
    -------
    bool

    Examples
    --------
    >>> iris.interpret.is_active()
    True
    """
    return _activated


def kernels_run_on_gpu() -> bool:
    """True when this process's kernels run on a GPU: a GPU backend, and Triton not switched to this interpreter
    (``iris.iris(backend="cpu")`` switches it on a GPU machine too). What timing and device queries answer for.

    Examples
    --------
    >>> kernels_run_on_gpu() in (True, False)
    True
    """
    from ..base.backend import choose_backend

    return not is_active() and choose_backend(None) == "cuda"
