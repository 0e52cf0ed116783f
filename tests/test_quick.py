"""The quick selection (tests/conftest.py's QUICK, `bash scripts/test.sh --quick`) covers every package of iris/
and workbench/, and each of its entries names a test that exists."""

from __future__ import annotations

import subprocess
import sys

from .conftest import QUICK
from .multirank import ROOT


def test_every_package_has_quick_tests():
    packages = sorted(".".join(path.parent.relative_to(ROOT).parts) for top in ("iris", "workbench")
                      for path in (ROOT / top).rglob("__init__.py"))
    missing = [package for package in packages if not QUICK.get(package)]
    assert missing == [], f"add a fast test of each of these packages to QUICK in tests/conftest.py: {missing}"


def test_every_quick_entry_names_a_test():
    entries = [entry for entries in QUICK.values() for entry in entries]
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *entries], cwd=ROOT,
                            capture_output=True, text=True)
    assert listed.returncode == 0, listed.stdout[-4000:] + listed.stderr[-4000:]
