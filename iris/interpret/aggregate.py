"""Make Triton's ``@aggregate`` classes (``triton.language.core._aggregate``) work on the interpreter.

Why: ``_aggregate`` (triton/language/core.py) builds a new value class and copies onto it only the
members that are plain functions or ``JITCallable``s. Under the interpreter ``@triton.jit`` and
``@gluon.jit`` return ``InterpretedFunction``s, which are neither, so every jit method is dropped
("'Ctx' object has no attribute 'load'"). ``InterpretedFunction`` has no ``__get__`` either (on the
GPU the code generator binds ``self``), so even a copied method would not receive its instance.

Two smaller gaps in the generated ``__setattr__`` type check: constexpr kernel arguments reach
device code as plain Python values under the interpreter (the compiler wraps them in
``tl.constexpr``), and float kernel arguments stay Python floats (the compiler makes fp32 scalars);
fields annotated ``tl.constexpr`` / ``tl.tensor`` then reject them.

Fix: wrap ``_aggregate``: call triton's own, then re-attach the interpreted methods (bound like
ordinary methods, ``@staticmethod``/``@classmethod`` kept as written) and coerce those two kinds of
field values the way the compiler would.
"""

import functools
import types

import triton.language.core as tl_core
from triton.runtime.interpreter import InterpretedFunction, interpreter_semantic

from ..base.patching import replace_once


class InterpretedMethod:
    """Descriptor that binds an interpreted jit function to the aggregate instance it is read from.

    Read from the class (``Ctx.initialize(...)``) it is the plain function, so the constructor
    style ``@triton.jit def initialize(context_tensor, ...)`` without ``self`` keeps working.

    Examples
    --------
    >>> ctx.load(ptr, 1)  # doctest: +SKIP  (calls load(ctx, ptr, 1))
    """

    def __init__(self, function):
        self.function = function

    def __get__(self, instance, owner=None):
        if instance is None:
            return self.function
        return types.MethodType(self.function, instance)


def _as_interpreted_member(raw_member):
    """The member to attach for a raw class attribute, or None when it is not an interpreted method."""
    if isinstance(raw_member, (staticmethod, classmethod)):
        return raw_member if isinstance(raw_member.__func__, InterpretedFunction) else None
    if isinstance(raw_member, InterpretedFunction):
        return InterpretedMethod(raw_member)
    return None


def _coerce_field_value(value, annotation):
    """Give a field value the type the compiled path would have given it."""
    if not isinstance(annotation, type):
        return value
    if issubclass(annotation, tl_core.constexpr) and not isinstance(value, tl_core.constexpr):
        return tl_core.constexpr(value)
    if issubclass(annotation, tl_core.tensor) and isinstance(value, float):
        return interpreter_semantic.to_tensor(value)
    return value


def _restore_interpreted_members(value_class, cls):
    raw_members = {}  # name -> attribute as written in the class body (staticmethod not unwrapped)
    for klass in reversed(cls.__mro__[:-1]):
        raw_members.update(vars(klass))
    for name, raw_member in raw_members.items():
        member = _as_interpreted_member(raw_member)
        if member is not None:
            setattr(value_class, name, member)


def _coerce_fields_on_assignment(value_class, cls):
    checked_setattr = value_class.__setattr__
    annotations = cls.__annotations__

    def setattr_coerced(self, name, value):
        checked_setattr(self, name, _coerce_field_value(value, annotations.get(name)))

    value_class.__setattr__ = setattr_coerced


def _interpreter_aware(triton_aggregate):
    @functools.wraps(triton_aggregate)
    def aggregate(cls):
        """Triton's ``@aggregate``, with jit methods kept and bound on the interpreter.

        Examples
        --------
        >>> from triton.language.core import _aggregate as aggregate  # after iris.interpret.activate()
        >>> @aggregate
        ... class Ctx:
        ...     rank: tl.constexpr
        ...     def __init__(self, rank):
        ...         self.rank = rank
        ...     @triton.jit
        ...     def twice(self):
        ...         return self.rank * 2
        """
        value_class = triton_aggregate(cls)
        _restore_interpreted_members(value_class, cls)
        _coerce_fields_on_assignment(value_class, cls)
        return value_class

    return aggregate


def install():
    """Replace ``triton.language.core._aggregate`` with the interpreter-aware wrapper.

    Code imports it by name (``from triton.language.core import _aggregate as aggregate``), so this
    must run before aggregate classes are defined; ``iris.interpret.activate()`` sees to that.
    """
    replace_once(tl_core, "_aggregate", _interpreter_aware)
