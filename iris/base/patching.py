"""Replace an attribute of Triton once, however often the adapter is installed."""

INSTALLED_MARK = "__iris_interpret_replacement__"


def replace_once(owner, name, make_replacement):
    """Set ``owner.name`` to ``make_replacement(original)`` unless this same replacement is already in place.

    Parameters
    ----------
    owner : module or class
        Where the attribute lives, e.g. ``triton.runtime.interpreter.GridExecutor``.
    name : str
        The attribute, e.g. ``"__call__"``.
    make_replacement : callable
        Called with the original attribute; returns the replacement (usually a wrapper of it).

    Examples
    --------
    >>> import types
    >>> box = types.SimpleNamespace(greet=lambda: "hi")
    >>> replace_once(box, "greet", lambda original: lambda: original() + "!")
    >>> replace_once(box, "greet", lambda original: lambda: original() + "!")
    >>> box.greet()
    'hi!'
    """
    original = getattr(owner, name)
    applied = getattr(original, INSTALLED_MARK, frozenset())
    key = f"{make_replacement.__module__}.{make_replacement.__qualname__}"
    if key in applied:  # several adapters may wrap one attribute, each of them once
        return
    replacement = make_replacement(original)
    setattr(replacement, INSTALLED_MARK, applied | {key})
    setattr(owner, name, replacement)
