"""Fixtures shared by test modules."""

from __future__ import annotations

import pytest

from .multirank import our_heap_files


@pytest.fixture
def no_heap_files_left_behind():
    """Fail the test if it leaves iris heap files, or the race checker's shadow files of heaps, in /dev/shm (use
    with ``pytest.mark.usefixtures``)."""
    before = our_heap_files()
    yield
    assert our_heap_files() - before == set(), "a test left heap or shadow files in /dev/shm"
