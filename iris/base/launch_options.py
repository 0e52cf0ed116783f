"""Launch options that only tune AMD GPUs (``waves_per_eu``, ``matrix_instr_nonkdim``, ``kpack``...), dropped here.

Upstream Iris's kernels are launched with them (``kernel[grid](..., waves_per_eu=2, matrix_instr_nonkdim=16)``).
Triton's CUDA backend refuses them with a bare ``KeyError("Keyword argument waves_per_eu was specified but
unrecognised")``, and its interpreter drops them without a word. Which options are AMD-only is read from the
installed Triton, not listed here: the fields of its AMD backend's options that its NVIDIA backend lacks
(triton 3.6: ``allow_flush_denorm``, ``kpack``, ``matrix_instr_nonkdim``, ``schedule_hint``, ``waves_per_eu``).
A kernel parameter of the same name is the kernel's, and is passed on.

Both of Triton's launch entry points drop those options before Triton sees them, with one
:class:`AMDOnlyOptionWarning` per option per process: ``JITFunction.run`` (GPUs, Gluon included) as ``import
iris`` installs :func:`install`, and ``InterpretedFunction.run`` (the CPU interpreter) as
:func:`iris.interpret.activate` installs its hook (:mod:`iris.interpret.launch_options`), with
:func:`dropping_amd_only` for both.

Examples
--------
>>> "waves_per_eu" in amd_only_options()
True
>>> copy_kernel[grid](src, dst, n, BLOCK=1024, waves_per_eu=2)   # doctest: +SKIP
AMDOnlyOptionWarning: launch option waves_per_eu=2 only tunes AMD GPUs; dropped on this backend ...
"""

from __future__ import annotations

import functools
import inspect
import warnings

from triton.runtime.jit import JITFunction

from .patching import replace_once
from .warning_site import warn_once


class AMDOnlyOptionWarning(UserWarning):
    """A launch option that only tunes AMD GPUs was dropped (once per option per process)."""


# Every name amd_only_options reads from triton 3.6 to 3.9 (3.9 added llvm_fn_attrs and wgp_cu_mode), for a
# Triton built without its AMD or NVIDIA backend.
KNOWN_AMD_ONLY_OPTIONS = frozenset({"allow_flush_denorm", "kpack", "llvm_fn_attrs", "matrix_instr_nonkdim",
                                    "schedule_hint", "waves_per_eu", "wgp_cu_mode"})


@functools.cache
def amd_only_options() -> frozenset[str]:
    """Launch options of Triton's AMD backend that its NVIDIA backend does not have (read from Triton)."""
    try:
        from triton.backends.amd.compiler import HIPOptions
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:  # a Triton built with one backend: the names the supported releases have
        return KNOWN_AMD_ONLY_OPTIONS
    return frozenset(HIPOptions.__dataclass_fields__) - frozenset(CUDAOptions.__dataclass_fields__)


def drop_amd_only(kwargs: dict, parameters) -> dict:
    """``kwargs`` without the AMD-only options that are not among the kernel's ``parameters``; warns once each.

    Examples
    --------
    >>> drop_amd_only({"BLOCK": 64, "kpack": 2}, ["x", "BLOCK"])           # doctest: +SKIP
    {'BLOCK': 64}
    """
    if amd_only_options().isdisjoint(kwargs):  # every launch comes here: the common case costs one check
        return kwargs
    dropped = (amd_only_options() & kwargs.keys()) - set(parameters)
    for name in sorted(dropped):
        warn_once(f"launch option {name}", f"launch option {name}={kwargs[name]!r} only tunes AMD GPUs; dropped on "
                  "this backend (NVIDIA GPUs and the CPU interpreter have no such option). Said once per option.",
                  AMDOnlyOptionWarning, "iris", "triton")
    return {key: value for key, value in kwargs.items() if key not in dropped}


def dropping_amd_only(run):
    """``run`` (a Triton launch entry point: ``run(self, *args, grid, warmup, **kwargs)``) dropping AMD options."""

    @functools.wraps(run)
    def launch(self, *args, grid, warmup, **kwargs):
        return run(self, *args, grid=grid, warmup=warmup, **drop_amd_only(kwargs, self.arg_names))

    return launch


def install_at(entry) -> None:
    """Drop AMD-only options at ``entry.run`` (a Triton launch entry point class); idempotent."""
    parameters = inspect.signature(entry.run).parameters
    if not {"grid", "warmup"} <= parameters.keys():  # the launch signature of triton 3.6 to 3.9
        warnings.warn(f"this Triton's {entry.__name__}.run{inspect.signature(entry.run)} is not the one iris "
                      "adapts: AMD-only launch options are passed to Triton as they are", RuntimeWarning,
                      stacklevel=2)
        return
    replace_once(entry, "run", dropping_amd_only)


def install() -> None:
    """Drop AMD-only options when a kernel is launched on a GPU; idempotent. ``import iris`` calls it."""
    install_at(JITFunction)
