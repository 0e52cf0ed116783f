"""Internals gate: the adapter patches Triton internals, so check that the installed Triton has them all.

The adapter works by feature detection, not by release: each module checks what it needs (and works around
what a release lacks) where it patches; this list is what every supported release must have.
"""

import importlib

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
    ("triton.runtime.interpreter", "_patch_lang_tensor"),
    ("triton.runtime.interpreter", "_implicit_cvt"),
    ("triton.runtime.interpreter", "ReduceOps.sum"),
    ("triton.runtime.interpreter", "ReduceOps.min_max"),
    ("triton.runtime.interpreter", "ScanOps.cumsum"),
    ("triton.runtime.interpreter", "ScanOps.cumprod"),
    ("triton._C.libtriton.interpreter", "atomic_cas"),
    ("triton._C.libtriton.interpreter", "atomic_rmw"),
    ("triton.runtime.interpreter", "InterpreterBuilder.ir_rmw_op_to_interpreter_rmw_op"),
    ("triton._C.libtriton.interpreter", "load"),
    ("triton.runtime.errors", "InterpreterError"),
    ("triton.language.semantic", "TritonSemantic"),
    ("triton.language.core", "_aggregate"),
    ("triton.language.core", "block_type"),
    ("triton.language.core", "TRITON_BUILTIN"),
    ("triton.language.core", "_unwrap_if_constexpr"),
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
    >>> missing_triton_internals()  # with any supported triton
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


def check_triton_internals():
    """Check that the installed Triton has every internal the adapter patches.

    Which release it is does not matter here (``import iris`` warns about releases outside the supported
    range: :mod:`iris.base.versions`); what matters is that the internals are where the adapter looks.

    Raises
    ------
    RuntimeError
        When internals the adapter patches are missing (Triton moved them): names them and the supported range.

    Examples
    --------
    >>> check_triton_internals()  # silent on every supported triton
    """
    import triton

    from ..base.versions import SUPPORTED

    missing = missing_triton_internals()
    if missing:
        triton_range = next(requirement for requirement in SUPPORTED if requirement.package == "triton")
        raise RuntimeError(
            f"iris.interpret cannot adapt triton {triton.__version__} for the CPU interpreter: these internals it "
            f"patches are missing: {', '.join(missing)}. iris supports triton {triton_range.span}: "
            f"pip install '{triton_range.specifier}'."
        )
