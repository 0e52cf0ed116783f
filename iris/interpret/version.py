"""Version gate: the adapter patches Triton internals, so check they are the ones it was written against."""

import importlib
import warnings

TESTED_TRITON_VERSIONS = ("3.6.0",)

# Every Triton internal the adapter reads or wraps, as (module, attribute); an attribute may be dotted
# (a class's method).
REQUIRED_TRITON_INTERNALS = (
    ("triton.knobs", "runtime"),
    ("triton.runtime.jit", "JITFunction"),
    ("triton.runtime.jit", "_normalize_ty"),
    ("triton.runtime.interpreter", "InterpretedFunction"),
    ("triton.runtime.interpreter", "GridExecutor"),
    ("triton.runtime.interpreter", "interpreter_builder"),
    ("triton.runtime.interpreter", "InterpreterBuilder"),
    ("triton.runtime.interpreter", "TensorHandle"),
    ("triton.runtime.interpreter", "InterpreterBuilder.create_masked_load"),
    ("triton.runtime.interpreter", "InterpreterBuilder.create_masked_store"),
    ("triton.runtime.interpreter", "InterpreterBuilder.create_atomic_rmw"),
    ("triton.runtime.interpreter", "InterpreterBuilder.create_atomic_cas"),
    ("triton.runtime.interpreter", "InterpreterBuilder.set_grid_idx"),
    ("triton._C.libtriton.ir", "MEM_SEMANTIC"),
    ("triton._C.libtriton.ir", "ATOMIC_OP"),
    ("triton.runtime.interpreter", "_LangPatchScope"),
    ("triton.runtime.errors", "InterpreterError"),
    ("triton.language.semantic", "TritonSemantic"),
    ("triton.language.core", "_aggregate"),
    ("triton.language.core", "block_type"),
    ("triton.language.core", "TRITON_BUILTIN"),
    ("triton.experimental.gluon", "jit"),
    ("triton.experimental.gluon._runtime", "jit"),
    ("triton.experimental.gluon._runtime", "GluonJITFunction"),
    ("triton.experimental.gluon.language", "AutoLayout"),
    ("triton.experimental.gluon.language._core", "arange"),
    ("triton.experimental.gluon.language._semantic", "GluonSemantic"),
)


def missing_triton_internals():
    """List the required Triton internals that the installed Triton lacks.

    Returns
    -------
    list of str
        Dotted names such as ``"triton.runtime.interpreter.GridExecutor"``; empty when all exist.

    Examples
    --------
    >>> missing_triton_internals()  # with triton 3.6.0
    []
    """
    missing = []
    for module_name, attribute in REQUIRED_TRITON_INTERNALS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            missing.append(module_name)
            continue
        owner = module
        for part in attribute.split("."):
            owner = getattr(owner, part, None)
        if owner is None:
            missing.append(f"{module_name}.{attribute}")
    return missing


def check_triton_version():
    """Check that the installed Triton can be adapted; warn when it was never tested.

    Raises
    ------
    RuntimeError
        When internals the adapter patches are missing (Triton moved them).

    Warns
    -----
    UserWarning
        When the Triton version is not in ``TESTED_TRITON_VERSIONS``, or when numpy >= 2.4
        is paired with triton 3.6 (its interpreter then fails on ``range(<tensor>)`` loops).

    Examples
    --------
    >>> check_triton_version()  # silent on triton 3.6.0 with numpy < 2.4
    """
    import numpy
    import triton

    version = triton.__version__
    missing = missing_triton_internals()
    if missing:
        raise RuntimeError(
            f"iris.interpret cannot adapt triton {version} for the CPU interpreter: these internals it "
            f"patches are missing: {', '.join(missing)}. Install a tested version, e.g. "
            f"pip install 'triton=={TESTED_TRITON_VERSIONS[-1]}' 'numpy<2.4'."
        )
    if version not in TESTED_TRITON_VERSIONS:
        warnings.warn(
            f"iris.interpret patches Triton internals to run Triton aggregates and Gluon kernels on the "
            f"CPU interpreter and was tested on triton {', '.join(TESTED_TRITON_VERSIONS)}; the installed "
            f"triton is {version}. If kernels misbehave on the CPU, pin "
            f"triton=={TESTED_TRITON_VERSIONS[-1]}.",
            stacklevel=3,
        )
    numpy_major_minor = tuple(int(part) for part in numpy.__version__.split(".")[:2])
    if version.startswith("3.6.") and numpy_major_minor >= (2, 4):
        warnings.warn(
            f"numpy {numpy.__version__} breaks triton {version}'s CPU interpreter on loops such as "
            "`for k in range(<tensor>)` (TypeError: only 0-dimensional arrays can be converted to "
            "Python scalars). Pin numpy<2.4.",
            stacklevel=3,
        )
