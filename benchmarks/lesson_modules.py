"""Write the kernel modules a lesson makes with ``%%writefile`` cells, so a benchmark can import them.

The lessons keep their kernels in the notebook (a ``%%writefile name.py`` cell, ``%%writefile -a`` to add to it),
which is where a student reads and edits them; a benchmark that times them outside Jupyter takes them from
there, so there is one copy of each kernel. A helper a lesson defines in an ordinary cell (its gate, its torch
baseline) comes out of the notebook the same way, by name (:func:`lesson_function`).

Examples
--------
>>> write_lesson_modules("notebooks/14_making_a_kernel_fast.ipynb", "/tmp/lesson14")   # doctest: +SKIP
['fast_all_gather.py']
>>> importlib.import_module("fast_all_gather")  # after lesson_directory(LESSON)         # doctest: +SKIP
>>> route = lesson_function("notebooks/11_moe_dispatch_combine.ipynb", "route", {"torch": torch})   # doctest: +SKIP
"""

from __future__ import annotations

import ast
import json
import sys
import tempfile
from pathlib import Path

_directories: list[tempfile.TemporaryDirectory] = []  # held until the process ends, when each removes itself


def write_lesson_modules(notebook: str | Path, directory: str | Path) -> list[str]:
    """Write every ``%%writefile`` cell of ``notebook`` into ``directory``, in cell order; return the names."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
        first, _, body = source.partition("\n")
        words = first.split()
        if not words or words[0] != "%%writefile":
            continue
        append, name = words[1] == "-a", words[-1]
        with open(directory / name, "a" if append else "w") as module:
            module.write(body if body.endswith("\n") else body + "\n")
        if name not in written:
            written.append(name)
    if not written:
        raise ValueError(f"{notebook}: no %%writefile cell; nothing to import")
    return written


def lesson_directory(notebook: str | Path) -> Path:
    """A temporary directory holding ``notebook``'s modules (:func:`write_lesson_modules`), first on ``sys.path``
    so they import by name, and removed when the process ends (every rank of a benchmark makes its own)."""
    directory = tempfile.TemporaryDirectory(prefix=f"iris-{Path(notebook).stem[:24]}-")
    _directories.append(directory)
    write_lesson_modules(notebook, directory.name)
    sys.path.insert(0, directory.name)
    return Path(directory.name)


def lesson_function(notebook: str | Path, name: str, namespace: dict):
    """The function ``name`` as ``notebook`` defines it, made in ``namespace`` and returned.

    The notebook must define it exactly once, in a code cell, at any depth (a ``def`` inside a cell's ``if`` too);
    only that ``def`` runs, not the cell around it, so ``namespace`` must hold every global name the function
    reads (the cell's variables it closes over included): a missing one is a ``NameError`` when it is called.
    Lines of IPython magics (``%...``) are left out before the cell is parsed.
    """
    found = []
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines(keepends=True)
        source = "".join("\n" if line.lstrip().startswith("%") else line for line in lines)
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a cell of shell or other magics
            continue
        found += [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == name]
    if len(found) != 1:
        raise ValueError(f"{notebook}: {len(found)} definitions of {name}(), not one")
    exec(compile(ast.Module(body=found, type_ignores=[]), f"{notebook}:{name}", "exec"), namespace)
    return namespace[name]
