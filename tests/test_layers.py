"""The layers of iris and the workbench, as pyproject.toml's import-linter contracts state them, and what those
contracts cannot see: import cycles between modules, Triton's interpreter and the CUDA driver touched only by their
own packages, upstream's paths never imported by our code, every upstream path that worked before still working.

A deliberate upward import and a deliberate cycle, each in a copy of the tree, must fail with the import named.
"""

from __future__ import annotations

import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
OUR_PACKAGES = ("iris", "workbench", "benchmarks")

# Every upstream Iris module path that imported before iris was arranged in layers (2026-11-28), and still must.
UPSTREAM_PATHS = [
    "iris.ccl", "iris.ccl.config", "iris.ccl.utils", "iris.ccl.all_reduce", "iris.ccl.all_gather",
    "iris.ccl.all_to_all", "iris.ccl.reduce_scatter", "iris.ops", "iris.ops.config", "iris.ops.workspace",
    "iris.ops.matmul_all_reduce", "iris.ops.matmul_all_gather", "iris.ops.matmul_reduce_scatter",
    "iris.ops.all_gather_matmul", "iris.ops.all_gather_matmul_hbm_buffer", "iris.bench", "iris.hip", "iris.device",
    "iris.device.utils", "iris.device.triton", "iris.device.triton.context", "iris.device.triton.ops",
    "iris.device.gluon", "iris.device.gluon.context", "iris.gluon", "iris.iris_gluon", "iris.experimental",
    "iris.experimental.iris_gluon", "iris.tensor_creation", "iris.host", "iris.host.iris", "iris.host.platform.hip",
    "iris.host.platform.utils", "iris.host.logging.logging", "iris.host.memory.tensors",
    "iris.host.memory.symmetric_heap", "iris.host.distributed.helpers", "iris.host.distributed.topology",
    "iris.host.tracing.events", "iris.host.tracing.core", "iris.mem", "iris.mem.triton", "iris.mem.triton.ops",
    "iris.mem.triton.context", "iris.mem.gluon", "iris.mem.gluon.context", "iris.mem.utils",
]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the tree at ``root`` with its pyproject.toml's contracts (no cache)."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(root), "HOME": str(root)})


def import_cycles(root: Path) -> list[list[str]]:
    """The module-level import cycles of our packages in the tree at ``root`` (tests/import_cycles.py, run in a
    fresh interpreter)."""
    found = subprocess.run([sys.executable, str(ROOT / "tests" / "import_cycles.py"), str(root)], capture_output=True,
                           text=True, timeout=300, cwd=root)
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import statement in ``path``, relative ones resolved."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    package = package.removesuffix(".__init__")
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def python_files(*folders: str):
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_the_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 5 kept, 0 broken." in result.stdout, result.stdout


def test_no_module_imports_itself_back():
    assert import_cycles(ROOT) == []


def copy_of_the_tree(tmp_path: Path) -> Path:
    for name in (*OUR_PACKAGES, "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.png", "*.json"))
        else:
            shutil.copy(source, tmp_path / name)
    return tmp_path


def tree_with(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the tree in which ``module`` (a path below the root) ends with one more import line."""
    tree = copy_of_the_tree(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # noqa: E402\n")
    return tree


def test_an_upward_import_breaks_the_contract_naming_the_import(tmp_path):
    result = lint_imports(tree_with(tmp_path, "iris/base/sizes.py", "from ..runtime import context"))
    assert result.returncode != 0
    assert "iris: each layer imports only the layers below it BROKEN" in result.stdout, result.stdout
    assert "iris.base.sizes -> iris.runtime.context" in result.stdout, result.stdout


def test_iris_importing_the_workbench_breaks_the_contract(tmp_path):
    result = lint_imports(tree_with(tmp_path, "iris/heap/reach.py", "import ipywidgets"))
    assert result.returncode != 0
    assert "iris.heap.reach -> ipywidgets" in result.stdout, result.stdout


def test_a_cycle_inside_a_layer_is_found(tmp_path):
    tree = tree_with(tmp_path, "iris/heap/allocator.py", "from . import symmetric")  # symmetric imports allocator
    assert ["iris.heap.allocator", "iris.heap.symmetric"] in import_cycles(tree)
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "No cycles are allowed in iris.heap" in result.stdout and ".symmetric -> .allocator" in result.stdout


def test_a_cycle_through_a_package_face_is_found(tmp_path):
    # a module importing its own package's __init__, which imports it: siblings alone would not show it
    tree = tree_with(tmp_path, "workbench/views.py", "import workbench")
    assert any({"workbench", "workbench.views"} <= set(cycle) for cycle in import_cycles(tree))


def test_iris_has_a_handful_of_layers_each_saying_what_it_holds():
    entries = sorted(p.name for p in (ROOT / "iris").iterdir() if p.name not in ("__init__.py", "__pycache__"))
    assert len(entries) <= 12, entries
    for entry in entries:
        init = ROOT / "iris" / entry / "__init__.py"
        assert init.is_file(), f"iris/{entry} is not a package: a layer is one"
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and len(docstring.splitlines()) >= 3, f"iris/{entry}/__init__.py: say what the layer holds"


def imports_outside(modules: tuple[str, ...], home: Path) -> list[str]:
    """Imports of ``modules`` (or modules below them) in iris/ and workbench/ files outside ``home``."""
    return [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in python_files("iris", "workbench")
            if not path.is_relative_to(home)
            for line, name in imports_of(path) if any(name == m or name.startswith(m + ".") for m in modules)]


def test_interpreter_hooks_only_in_the_interpreters_package():
    hooks = ("triton.runtime.interpreter", "triton._C.libtriton.interpreter")
    assert imports_outside(hooks, ROOT / "iris" / "interpret") == []
    assert imports_outside(hooks, ROOT / "iris" / "heap"), "the check sees the interpreter's own imports"


def test_the_cuda_driver_only_in_the_heaps_cuda_backend():
    assert imports_outside(("cuda",), ROOT / "iris" / "heap" / "cuda") == []
    assert imports_outside(("cuda",), ROOT / "iris" / "interpret"), "the check sees the CUDA backend's own imports"


def test_our_code_never_imports_upstreams_paths():
    from iris.upstream import IMPORT_ONLY, UPSTREAM_MODULES

    upstream = set(UPSTREAM_MODULES) | set(IMPORT_ONLY) | {"iris.host", "iris.mem", "iris.experimental"}
    face, room = ROOT / "iris" / "__init__.py", ROOT / "iris" / "upstream"
    offending = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in python_files(*OUR_PACKAGES)
                 if path != face and not path.is_relative_to(room)
                 for line, name in imports_of(path)
                 if name in upstream or name == "iris.upstream" or name.startswith("iris.upstream.")]
    assert offending == [], "import our own module instead (iris/upstream/__init__.py's table says which)"


@pytest.mark.parametrize("path", UPSTREAM_PATHS)
def test_every_upstream_path_still_imports(path):
    module = importlib.import_module(path)
    assert module.__name__.startswith("iris")
