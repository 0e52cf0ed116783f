"""Write the kernel modules a lesson makes with ``%%writefile`` cells, so a benchmark can import them.

The lessons keep their kernels in the notebook (a ``%%writefile name.py`` cell, ``%%writefile -a`` to add to it),
which is where a student reads and edits them; a benchmark that times them outside Jupyter takes them from
there, so there is one copy of each kernel.

Examples
--------
>>> write_lesson_modules("notebooks/14_making_a_kernel_fast.ipynb", "/tmp/lesson14")   # doctest: +SKIP
['fast_all_gather.py']
>>> importlib.import_module("fast_all_gather")  # after lesson_directory(LESSON)         # doctest: +SKIP
"""

from __future__ import annotations

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
