"""Fixtures shared by test modules."""

from __future__ import annotations

import os

import pytest

from iris.heap.cpu import PREFIX, SHM_DIR


def our_heap_files() -> set[str]:
    """Names of iris CPU heap files now in /dev/shm."""
    return {name for name in os.listdir(SHM_DIR) if name.startswith(PREFIX)}


@pytest.fixture
def no_heap_files_left_behind():
    """Fail the test if it leaves iris heap files in /dev/shm (use with ``pytest.mark.usefixtures``)."""
    before = our_heap_files()
    yield
    assert our_heap_files() - before == set(), "a test left heap files in /dev/shm"
