"""Run ``@gluon.jit`` kernels on the Triton CPU interpreter, layouts ignored.

Why: ``gluon.jit`` (triton/experimental/gluon/_runtime.py) always returns a ``GluonJITFunction`` that
goes to the GPU compiler; unlike ``triton.jit`` it has no ``knobs.runtime.interpret`` branch, so on a
CPU machine every launch fails with "0 active drivers". And the ``gl.*`` builtins expect a
``GluonSemantic`` (``_semantic=`` keyword) that the interpreter never supplies.

Fix, in three parts:

* ``gluon.jit`` returns a :class:`GluonInterpretedFunction` while the interpreter is on;
* :class:`GluonInterpreterSemantic` is the interpreter's ``TritonSemantic`` plus the Gluon-only
  operations: those that only place data (``arange``/``full`` with a layout, ``convert_layout``,
  ``set_auto_layout``) drop the layout, ``num_warps``/``num_ctas`` report the launch's values, and
  everything else Gluon-only (shared memory, ``warp_specialize``...) raises
  :class:`~iris.interpret.errors.UnsupportedOnInterpreter`;
* every interpreted launch binds the ``gl`` namespace to that semantic, the same way triton's
  ``_patch_lang`` binds ``triton.language`` for the launch, and restores it afterwards.

Examples
--------
>>> import iris.interpret; iris.interpret.activate()
>>> from triton.experimental import gluon
>>> from triton.experimental.gluon import language as gl
>>> @gluon.jit
... def double(x_ptr, BLOCK: gl.constexpr):
...     offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
...     gl.store(x_ptr + offs, gl.load(x_ptr + offs) * 2)
>>> double[(1,)](torch.ones(128), BLOCK=128)  # doctest: +SKIP
"""

import functools
import inspect
import sys

import triton
import triton.experimental.gluon as gluon_package
import triton.experimental.gluon._runtime as gluon_runtime
import triton.experimental.gluon.language as gl
import triton.experimental.gluon.language._core as gl_core
import triton.language as tl
from triton.experimental.gluon.language._semantic import GluonSemantic
from triton.language.core import TRITON_BUILTIN, _unwrap_if_constexpr
from triton.language.semantic import TritonSemantic
from triton.runtime import interpreter
from triton.runtime.errors import InterpreterError

from ..base.patching import replace_once
from .errors import UnsupportedOnInterpreter, first_cause

DEFAULT_NUM_WARPS = 4  # what a triton launch uses when num_warps= is not given

# Gluon wraps these tl.core functions with ``builtin(tl_core.<name>)`` at import, capturing the
# original function objects. triton's ``_patch_lang`` replaces them on ``triton.language`` for the
# duration of a launch (reductions and scans run in numpy, static_range becomes ``range``, ...), but
# the gl wrappers would still call the originals, which need the GPU compiler. Forward them to
# whatever ``triton.language.<name>`` is when called.
FORWARDED_TO_TRITON_LANGUAGE = (
    "reduce",
    "associative_scan",
    "static_range",
    "static_assert",
    "static_print",
    "multiple_of",
    "max_contiguous",
    "max_constancy",
)

# gl builtins that do not go through a semantic method the interpreter could answer.
UNSUPPORTED_GL_BUILTINS = {"dot_fma": "gl.dot_fma needs DotOperandLayout operands"}

# Hardware-specific Gluon submodules: TMA, mbarrier, async copies, tensor memory, MMA, buffer ops.
HARDWARE_SUBMODULE_PREFIXES = (
    "triton.experimental.gluon.language.nvidia",
    "triton.experimental.gluon.language.amd",
)

FEATURE_NAMES = {
    "allocate_shared": "gl.allocate_shared_memory (shared memory descriptors)",
    "warp_specialize": "gl.warp_specialize",
    "fp4_to_fp": "gl.fp4_to_fp",
    "bank_conflicts": "gl.bank_conflicts",
    "to_linear_layout": "gl.to_linear_layout",
}


class GluonInterpreterSemantic(TritonSemantic):
    """The interpreter's ``TritonSemantic`` extended with Gluon's operations, layouts dropped.

    Parameters
    ----------
    builder : InterpreterBuilder
        The interpreter's builder (``triton.runtime.interpreter.interpreter_builder``).
    num_warps : int
        What ``gl.num_warps()`` reports: the launch's ``num_warps=``.

    Examples
    --------
    >>> semantic = GluonInterpreterSemantic(interpreter.interpreter_builder, num_warps=4)
    >>> semantic.num_warps()
    constexpr[4]
    """

    def __init__(self, builder, num_warps=DEFAULT_NUM_WARPS):
        super().__init__(builder)
        self.launch_num_warps = num_warps

    def arange(self, start, end, layout=None, *, ret_ty=None):
        return super().arange(start, end, ret_ty=ret_ty)

    def full(self, shape, value, dtype, layout=None):
        return super().full(shape, value, dtype)

    def histogram(self, input, num_bins, mask, layout=None):
        return super().histogram(input, num_bins, mask)

    def convert_layout(self, value, layout, assert_trivial=False):
        return value

    def set_auto_layout(self, value, layout):
        return value

    def num_warps(self, generator=None):
        return tl.constexpr(self.launch_num_warps)

    def to_tensor(self, x, check_type=True):
        # Python runs ``gl.num_warps() + offs`` as constexpr.__add__, which wraps the tensor it computes in a
        # constexpr (the compiler would have called the tensor's __radd__). triton 3.6's to_tensor unwrapped a
        # constexpr before asking whether it holds a tensor; 3.7 and later ask first and refuse ("cannot
        # convert [308] of type <class 'triton.language.core.tensor'> to tensor"). Unwrap first on every version.
        return super().to_tensor(_unwrap_if_constexpr(x), check_type)

    def num_ctas(self):
        return tl.constexpr(1)


def _unsupported_operation(name):
    feature = FEATURE_NAMES.get(name, f"the Gluon operation {name!r}")

    def raise_unsupported(self, *args, **kwargs):
        raise UnsupportedOnInterpreter(feature)

    raise_unsupported.__name__ = name
    return raise_unsupported


def _add_unsupported_operations():
    """Every Gluon-only semantic operation not emulated above raises instead of misbehaving."""
    for name, _ in inspect.getmembers(GluonSemantic, inspect.isfunction):
        if not name.startswith("_") and not hasattr(GluonInterpreterSemantic, name):
            setattr(GluonInterpreterSemantic, name, _unsupported_operation(name))


_add_unsupported_operations()


class GluonInterpretedFunction(interpreter.InterpretedFunction):
    """What ``@gluon.jit`` returns while the interpreter is on.

    Why a subclass: ``InterpretedFunction.__call__`` (a device-function call) runs triton's
    ``_patch_lang(fn)``, which asserts that ``triton.language`` is visible in the function's module,
    *before* rewriting it. Rewriting is what makes it visible (``FunctionRewriter._compile_and_exec``
    adds the interpreter's globals, ``tl`` among them, to the function's module), so a Gluon helper in
    a module that imports only ``gl`` failed on its first call. Rewrite first, then call.

    Examples
    --------
    >>> @gluon.jit  # after iris.interpret.activate()
    ... def helper(x):
    ...     return x + 1
    >>> type(helper).__name__
    'GluonInterpretedFunction'
    """

    def __call__(self, *args, **kwargs):
        self.rewrite()
        return super().__call__(*args, **kwargs)


def _with_semantic(builtin_function, semantic):
    @functools.wraps(builtin_function)
    def call(*args, _semantic=None, **kwargs):
        return builtin_function(*args, _semantic=semantic, **kwargs)

    return call


def _forward_to_triton_language(name):
    def call(*args, **kwargs):
        return getattr(tl, name)(*args, **kwargs)

    call.__name__ = name
    return call


def _raise_unsupported(feature, reason=""):
    def call(*args, **kwargs):
        raise UnsupportedOnInterpreter(feature, reason)

    call.__name__ = feature.rsplit(".", 1)[-1]
    return call


def _is_builtin_function(member):
    return inspect.isfunction(member) and getattr(member, TRITON_BUILTIN, False)


def _hardware_modules():
    modules = list(sys.modules.items())
    return [module for name, module in modules if name.startswith(HARDWARE_SUBMODULE_PREFIXES)]


def gluon_language_scope(semantic):
    """Bind the ``gl`` namespace to the interpreter for one launch.

    Parameters
    ----------
    semantic : GluonInterpreterSemantic
        Passed as ``_semantic`` to every ``gl`` builtin.

    Returns
    -------
    triton.runtime.interpreter._LangPatchScope
        Call ``.restore()`` when the launch is over.

    Examples
    --------
    >>> scope = gluon_language_scope(GluonInterpreterSemantic(interpreter.interpreter_builder))
    >>> scope.restore()
    """
    scope = interpreter._LangPatchScope()
    # gl (the public namespace) and _core (what gl's own helpers such as gl.zeros call through).
    for module in (gl, gl_core):
        for name, member in inspect.getmembers(module):
            if name in FORWARDED_TO_TRITON_LANGUAGE:
                scope.set_attr(module, name, _forward_to_triton_language(name))
            elif name in UNSUPPORTED_GL_BUILTINS:
                scope.set_attr(module, name, _raise_unsupported(f"gl.{name}", UNSUPPORTED_GL_BUILTINS[name]))
            elif _is_builtin_function(member):
                scope.set_attr(module, name, _with_semantic(member, semantic))
    for module in _hardware_modules():
        for name, member in vars(module).copy().items():
            if _is_builtin_function(member) and member.__module__.startswith(HARDWARE_SUBMODULE_PREFIXES):
                feature = f"{member.__module__.removeprefix('triton.experimental.gluon.language.')}.{name}"
                reason = "TMA, mbarrier, async copies, tensor memory and MMA exist only on the GPU"
                scope.set_attr(module, name, _raise_unsupported(feature, reason))
    # Gluon code reads ``tensor.type.layout`` (gl.zeros_like and gl.full_like do, and so do kernels
    # that derive a SliceLayout from a tensor's layout). Interpreter tensors carry plain block types,
    # so give those the placeholder layout "decided by the compiler".
    scope.set_attr(tl.core.block_type, "layout", gl.AutoLayout())
    return scope


def _interpreted_when_interpreting(gluon_jit):
    @functools.wraps(gluon_jit)
    def jit(fn=None, **options):
        if not triton.knobs.runtime.interpret:
            return gluon_jit(fn, **options)

        def decorator(function):
            return GluonInterpretedFunction(function, **options)

        return decorator if fn is None else decorator(fn)

    return jit


def _running_gluon_too(run_launch):
    @functools.wraps(run_launch)
    def run_launch_with_gluon(self, *args, **kwargs):
        num_warps = kwargs.get("num_warps", DEFAULT_NUM_WARPS)
        scope = gluon_language_scope(GluonInterpreterSemantic(interpreter.interpreter_builder, num_warps))
        try:
            return run_launch(self, *args, **kwargs)
        except InterpreterError as error:
            # The interpreter wraps every kernel exception in InterpreterError(repr(e)); surface
            # UnsupportedOnInterpreter itself so that callers can catch it by type.
            unsupported = first_cause(error, UnsupportedOnInterpreter)
            if unsupported is None:
                raise
        finally:
            scope.restore()
        # Raised outside the handler, where the wrapper would become its context and that wrapper's causes lead
        # back to it: a cycle that code walking the chain never leaves (iris.interpret.kernel_errors says more).
        raise unsupported

    return run_launch_with_gluon


def install():
    """Make ``gluon.jit`` interpret, and every interpreted launch able to run Gluon code."""
    replace_once(gluon_runtime, "jit", _interpreted_when_interpreting)
    gluon_package.jit = gluon_runtime.jit  # what ``from triton.experimental import gluon; gluon.jit`` reads
    replace_once(interpreter.GridExecutor, "__call__", _running_gluon_too)
