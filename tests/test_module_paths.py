"""Every ``iris.`` dotted name the README, the docs and the lessons use resolves: as a module path (``import
iris.tracing.timeline``) as far as one exists, the rest as attributes (``iris.DeviceContext.initialize``).

The short paths (``iris.tracing``, ``iris.traffic``, ``iris.flags``...: ``iris.SHORT_PATHS``) must import as modules,
their submodules too, each the very module object of its layer's path (:mod:`iris.base.module_paths`).
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import iris

ROOT = Path(__file__).resolve().parent.parent
# ``iris.`` then names; not part of a path or a longer word (iris/host/iris.py, my_iris.x).
DOTTED = re.compile(r"(?<![\w/.\-])iris(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FILE_SUFFIXES = (".py", ".md", ".json", ".ipynb", ".sh", ".txt", ".toml")
# Names the docs mention as upstream's and absent here, saying so where they stand (docs/upstream.md: "Not built here
# yet: fabric drivers (iris.drivers)").
NAMED_AS_ABSENT = {"iris.drivers"}


def documented_texts() -> dict[str, str]:
    """The README, the docs' Markdown pages and the lessons' cells (code and text), by file."""
    texts = {"README.md": (ROOT / "README.md").read_text()}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if "_build" not in page.parts:
            texts[str(page.relative_to(ROOT))] = page.read_text()
    for lesson in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(lesson.read_text())["cells"]
        texts[str(lesson.relative_to(ROOT))] = "\n".join("".join(cell["source"]) for cell in cells)
    return texts


def dotted_names() -> dict[str, str]:
    """Each dotted name used, with the first file using it."""
    found: dict[str, str] = {}
    for where, text in documented_texts().items():
        for name in DOTTED.findall(text):
            if name.endswith(FILE_SUFFIXES) or name in NAMED_AS_ABSENT:
                continue
            found.setdefault(name, where)
    return found


def resolve(name: str):
    """The object ``name`` names: the longest prefix that imports as a module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            thing = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            thing = getattr(thing, attribute)
        return thing
    raise ModuleNotFoundError(name)


NAMES = dotted_names()


def test_the_documents_name_many_iris_paths():
    assert len(NAMES) > 100, sorted(NAMES)  # the extraction works: README, docs and lessons name hundreds
    assert "iris.tracing.timeline.Timeline.from_trace" in NAMES and "iris.traffic.record" in NAMES


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_documented_name_resolves(name):
    try:
        resolve(name)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{name} (used in {NAMES[name]}) does not resolve: {error}")


@pytest.mark.parametrize("short, long", sorted(iris.SHORT_PATHS.items()))
def test_short_paths_import_as_the_same_modules(short, long):
    assert importlib.import_module(short) is importlib.import_module(long)


def test_submodules_of_short_paths_are_the_same_objects_in_a_fresh_process():
    # A fresh interpreter: the short path imported before the long one, so nothing was imported for it beforehand.
    code = (
        "import iris\n"
        "from iris.tracing.timeline import Timeline\n"
        "import iris.traffic.minimum, iris.checking.races, iris.topology.map\n"
        "import iris.instruments.tracing.timeline as long\n"
        "assert Timeline is long.Timeline and Timeline.__module__ == 'iris.instruments.tracing.timeline'\n"
        "assert long.__spec__.name == 'iris.instruments.tracing.timeline'\n"
        "import sys\n"
        "assert sys.modules['iris.traffic.minimum'] is sys.modules['iris.instruments.traffic.minimum']\n"
        "assert iris.topology.map is sys.modules['iris.heap.topology.map']\n"
        "try:\n"
        "    import iris.tracing.no_such_module\n"
        "except ModuleNotFoundError as e:\n"
        "    assert e.name == 'iris.tracing.no_such_module', e.name\n"
        "else:\n"
        "    raise AssertionError('a missing submodule imported')\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "IRIS_BACKEND": "cpu", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_the_documented_table_of_upstreams_paths_is_the_code_table():
    # docs/upstream.md's tables ("Where upstream's module paths live") list exactly iris/upstream's, each path with
    # the module it is
    from iris.upstream import IMPORT_ONLY, UPSTREAM_MODULES

    text = (ROOT / "docs" / "upstream.md").read_text()
    rows = re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|$", text, re.M)
    assert dict(rows) == {**UPSTREAM_MODULES, **IMPORT_ONLY} and len(rows) == len(UPSTREAM_MODULES) + len(IMPORT_ONLY)
