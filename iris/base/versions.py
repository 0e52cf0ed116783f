"""The releases of triton, numpy and torch that iris supports, and the check ``import iris`` makes of them.

One place for the range: ``pyproject.toml``'s dependencies state the same specifiers (a test compares them).
What differs between supported releases is handled where it matters, by feature detection: Triton's
interpreter internals in :mod:`iris.interpret`, Gluon's names in :mod:`iris.language.gluon`, ptxas's rules in
:mod:`iris.language.core`.

Examples
--------
>>> from iris.base.versions import SUPPORTED, unsupported_versions
>>> [requirement.specifier for requirement in SUPPORTED]
['triton>=3.6,<3.10', 'numpy>=2.3,<2.6', 'torch>=2.11,<2.16']
>>> unsupported_versions({"triton": "3.5.1", "numpy": "2.4.6", "torch": "2.13.0+cpu"})
["iris supports triton 3.6 to 3.9.x; this environment has triton 3.5.1 (pip install 'triton>=3.6,<3.10')"]
"""

from __future__ import annotations

import importlib
import re
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Requirement:
    """A package and the releases iris supports: ``lowest <= (major, minor) < below``.

    Examples
    --------
    >>> Requirement("triton", (3, 6), (3, 10)).admits("3.9.0")
    True
    """

    package: str
    lowest: tuple[int, int]
    below: tuple[int, int]

    @property
    def specifier(self) -> str:
        """The pip requirement, as ``pyproject.toml`` writes it."""
        return f"{self.package}>={_dotted(self.lowest)},<{_dotted(self.below)}"

    @property
    def span(self) -> str:
        """The range in words: ``"3.6 to 3.9.x"``."""
        if self.below[1] == 0:
            return f"{_dotted(self.lowest)} up to (not including) {_dotted(self.below)}"
        return f"{_dotted(self.lowest)} to {_dotted((self.below[0], self.below[1] - 1))}.x"

    def admits(self, version: str) -> bool:
        """Whether ``version`` (as ``__version__`` spells it: ``"2.13.0+cpu"``, ``"3.9.0"``) is supported."""
        release = major_minor(version)
        return release is not None and self.lowest <= release < self.below


# Measured on the CPU (Python 3.11: numpy's newest there is 2.4; the GPU image pairs numpy 2.5 with triton 3.6)
# and compiled for sm_90 with every triton of the range; on GPUs with the lent machines' torch 2.11 and
# triton 3.6 (benchmarks/RESULTS.md says what ran where).
SUPPORTED = (
    Requirement("triton", (3, 6), (3, 10)),
    Requirement("numpy", (2, 3), (2, 6)),
    Requirement("torch", (2, 11), (2, 16)),
)


class UnsupportedVersionWarning(UserWarning):
    """An installed triton, numpy or torch is outside the range iris supports (:data:`SUPPORTED`)."""


def major_minor(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string, or None when it does not start with two numbers.

    Examples
    --------
    >>> major_minor("2.13.0+cpu"), major_minor("3.9.0rc1"), major_minor("nightly")
    ((2, 13), (3, 9), None)
    """
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def installed_versions() -> dict[str, str]:
    """``{package: __version__}`` for the packages of :data:`SUPPORTED` (all of them are imported by iris)."""
    return {requirement.package: importlib.import_module(requirement.package).__version__
            for requirement in SUPPORTED}


def unsupported_versions(versions: dict[str, str]) -> list[str]:
    """One sentence per package of ``versions`` outside the supported range: which range, and what to install.

    Parameters
    ----------
    versions : dict of str to str
        ``{package: version}``, e.g. :func:`installed_versions`.

    Returns
    -------
    list of str
        Empty when every version is supported.
    """
    return [
        f"iris supports {requirement.package} {requirement.span}; this environment has {requirement.package} "
        f"{versions[requirement.package]} (pip install '{requirement.specifier}')"
        for requirement in SUPPORTED
        if requirement.package in versions and not requirement.admits(versions[requirement.package])
    ]


def check_versions() -> None:
    """Warn once per unsupported package; say nothing when every installed version is supported.

    ``import iris`` calls it. A warning, not an error: a newer release often works, and a user may need to
    try it; where it does not, the warning says what to install.

    Warns
    -----
    UnsupportedVersionWarning
        For each of triton, numpy and torch outside :data:`SUPPORTED`.

    Examples
    --------
    >>> check_versions()   # silent with triton 3.6 to 3.9, numpy 2.3 to 2.5, torch 2.11 to 2.15
    """
    for sentence in unsupported_versions(installed_versions()):
        warnings.warn(f"{sentence}. Outside that range kernels may fail to compile or, on the CPU interpreter, "
                      "misbehave.", UnsupportedVersionWarning, stacklevel=3)


def _dotted(release: tuple[int, int]) -> str:
    return ".".join(str(part) for part in release)
