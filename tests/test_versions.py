"""iris.base.versions: the supported range of triton, numpy and torch, and what `import iris` says about it."""

import subprocess
import sys

import pytest

from iris.base import versions
from iris.base.versions import SUPPORTED, UnsupportedVersionWarning

from .multirank import ROOT

SUPPORTED_STACK = {"triton": "3.9.0", "numpy": "2.5.2", "torch": "2.11.0+cu128"}


def test_pyproject_states_the_same_range():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in SUPPORTED:
        assert requirement.specifier in dependencies, (requirement.specifier, dependencies)


@pytest.mark.parametrize("triton", ["3.6.0", "3.7.1", "3.8.0", "3.9.0", "3.9.2+git1234"])
@pytest.mark.parametrize("numpy", ["2.3.5", "2.4.6", "2.5.2"])
def test_every_supported_release_is_admitted(triton, numpy):
    assert versions.unsupported_versions({"triton": triton, "numpy": numpy, "torch": "2.15.0"}) == []


@pytest.mark.parametrize("package, version, span, specifier", [
    ("triton", "3.5.1", "3.6 to 3.9.x", "triton>=3.6,<3.10"),
    ("triton", "3.10.0", "3.6 to 3.9.x", "triton>=3.6,<3.10"),
    ("numpy", "1.26.4", "2.3 to 2.5.x", "numpy>=2.3,<2.6"),
    ("torch", "2.10.0+cpu", "2.11 to 2.15.x", "torch>=2.11,<2.16"),
    ("torch", "nightly", "2.11 to 2.15.x", "torch>=2.11,<2.16"),
])
def test_an_unsupported_release_is_named_with_the_range_and_the_cure(package, version, span, specifier):
    said = versions.unsupported_versions({**SUPPORTED_STACK, package: version})
    assert said == [f"iris supports {package} {span}; this environment has {package} {version} "
                    f"(pip install '{specifier}')"]


def test_check_versions_warns_once_per_unsupported_package(monkeypatch):
    import numpy

    monkeypatch.setattr(numpy, "__version__", "2.2.6")
    with pytest.warns(UnsupportedVersionWarning) as warned:
        versions.check_versions()
    assert [str(warning.message) for warning in warned] == [
        "iris supports numpy 2.3 to 2.5.x; this environment has numpy 2.2.6 (pip install 'numpy>=2.3,<2.6'). "
        "Outside that range kernels may fail to compile or, on the CPU interpreter, misbehave."]


def test_import_iris_says_nothing_on_this_supported_stack():
    # A fresh process with every warning an error: importing iris (which activates the interpreter here) is silent.
    # (triton 3.9's bindings may report leaked nanobind objects at exit on stderr: not ours, not a warning.)
    done = subprocess.run([sys.executable, "-W", "error", "-c", "import iris, iris.gluon"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr[-2000:]
