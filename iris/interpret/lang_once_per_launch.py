"""Patch ``triton.language`` once per launch, not again at every device-function call.

Why: a launch (``GridExecutor.__call__`` in triton/runtime/interpreter.py) binds ``triton.language`` to the
interpreter with ``_patch_lang(fn)`` and keeps it bound until the launch ends. Every call of a ``@triton.jit``
function from inside the kernel (``InterpretedFunction.__call__``) runs ``_patch_lang`` again: an
``inspect.getmembers`` walk over ``tl``, ``tl.tensor`` and ``tl.math`` that finds every builtin already bound
and only re-sets the launch's own helpers (``range``, ``to_ir``, ``__index__``...) to equal copies. That repeat
was 4.4 s of the 9.9 s that one rank of tests/rank_cases_ccl.py:other_collectives spent in kernels (iris
kernels call device functions in every loop).

Fix: while a launch runs, a device function's ``_patch_lang`` is skipped when every ``triton.language`` module it
would bind (``tl`` and ``tl.core``, whichever its module sees) is bound already in this launch; otherwise
triton's runs as before. Outside launches nothing changes. Installed only where re-binding is found to change
nothing (:func:`repatching_changes_nothing`, tried on the installed Triton, not assumed from its version).

Examples
--------
>>> import iris.interpret; iris.interpret.activate()   # installs this where the probe agrees
>>> @triton.jit
... def twice(x):
...     return x * 2
>>> @triton.jit
... def kernel(x_ptr):
...     for _ in range(100):                               # 100 device calls, triton.language bound once
...         tl.store(x_ptr, twice(tl.load(x_ptr)))
"""

import functools
import types

import triton.language as tl
from triton.runtime import interpreter

from ..base.patching import replace_once

_launch_languages = None  # the triton.language modules bound for the running launch; None outside launches


def visible_languages(fn):
    """The ``triton.language`` modules that triton's ``_patch_lang(fn)`` binds: those ``fn``'s module sees.

    Parameters
    ----------
    fn : function
        A jit function's Python function.

    Returns
    -------
    set of module
        A subset of ``{triton.language, triton.language.core}``.

    Examples
    --------
    >>> visible_languages(visible_languages) == {tl}
    True
    """
    return {value for value in fn.__globals__.values() if value is tl or value is tl.core}


def _same_definition(replaced, replacement):
    """Whether two patch values are one definition made twice (equal closures), not a wrapper of the other."""
    if replaced is replacement:
        return True
    if isinstance(replaced, functools.partial) and isinstance(replacement, functools.partial):
        return (_same_definition(replaced.func, replacement.func) and replaced.args == replacement.args
                and replaced.keywords == replacement.keywords)
    if isinstance(replaced, property) and isinstance(replacement, property):
        return all(_same_definition(getattr(replaced, part), getattr(replacement, part))
                   for part in ("fget", "fset", "fdel"))
    code = getattr(replacement, "__code__", None)
    return (code is not None and code is getattr(replaced, "__code__", None)
            and _same_values(replaced.__defaults__, replacement.__defaults__)
            and _same_values(replaced.__kwdefaults__, replacement.__kwdefaults__))


def _same_values(first, second):
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(first[key] is second[key] for key in first)
    if first is None or second is None:
        return first is second
    return len(first) == len(second) and all(a is b for a, b in zip(first, second, strict=True))


def repatching_changes_nothing() -> bool:
    """Whether the installed Triton's ``_patch_lang``, run again while its first run is in place, only re-sets
    what the first run set, each to the same definition (so that skipping the repeat changes nothing).

    Tried with a function that sees both ``triton.language`` and ``triton.language.core``; both runs are
    restored before it returns.

    Returns
    -------
    bool
        True with triton 3.6 and 3.9 (both tried); False without ``_patch_lang`` or where its repeat binds anew.

    Examples
    --------
    >>> repatching_changes_nothing()
    True
    """
    patch_lang = getattr(interpreter, "_patch_lang", None)
    if patch_lang is None:
        return False
    probe = types.FunctionType((lambda: None).__code__, {"tl": tl, "core": tl.core})
    first = patch_lang(probe)
    try:
        second = patch_lang(probe)
        try:
            return _repeat_only_remade(first, second)
        finally:
            second.restore()
    finally:
        first.restore()


def _repeat_only_remade(first, second):
    """Whether every attribute the ``second`` scope set was set by ``first`` and now holds the same definition."""
    set_by_first = {(id(owner), name) for owner, name, _ in getattr(first, "_changes", ())}
    changes = getattr(second, "_changes", None)
    if changes is None:
        return False
    left_by_first = {}  # (id(owner), name) -> (owner, name, the value the first run left there)
    for owner, name, replaced in changes:  # an attribute set twice in one run: its first replaced value counts
        left_by_first.setdefault((id(owner), name), (owner, name, replaced))
    return all(key in set_by_first and _same_definition(replaced, getattr(owner, name))
               for key, (owner, name, replaced) in left_by_first.items())


def _skipping_repeats_within_a_launch(patch_lang):
    @functools.wraps(patch_lang)
    def patch(fn):
        if _launch_languages is None:
            return patch_lang(fn)
        languages = visible_languages(fn)
        if languages and languages <= _launch_languages:
            return interpreter._LangPatchScope()  # bound already; the caller may restore this: nothing
        scope = patch_lang(fn)
        _launch_languages.update(languages)  # bound until the launch restores its own patches
        return scope

    return patch


def _tracking_the_launch(run_launch):
    @functools.wraps(run_launch)
    def run_launch_tracked(self, *args, **kwargs):
        global _launch_languages
        enclosing, _launch_languages = _launch_languages, set()
        try:
            return run_launch(self, *args, **kwargs)
        finally:
            _launch_languages = enclosing

    return run_launch_tracked


def install():
    """Skip device functions' repeats of the launch's ``_patch_lang``, where the probe finds them redundant."""
    if repatching_changes_nothing():
        replace_once(interpreter.GridExecutor, "__call__", _tracking_the_launch)
        replace_once(interpreter, "_patch_lang", _skipping_repeats_within_a_launch)
