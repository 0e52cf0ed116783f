"""Fixtures shared by test modules."""

from __future__ import annotations

import os
import re

import psutil
import pytest

from .multirank import our_heap_files

# scripts/test.sh runs lanes of tests side by side (each its own pytest, one /dev/shm): each lane's processes carry
# its name in this variable, so that a lane tells another lane's heap files from its own.
LANE = "IRIS_TEST_LANE"


def _another_lanes(name: str) -> bool:
    """Whether heap file ``name`` belongs to a live process of another test lane (or another user's, or a run
    outside the lanes while this one is in one). A file whose process has ended is never another lane's: it was
    left behind. A file owned by another user is never ours, whatever its name says: the classroom check's second
    user makes names like our heap files' (one of them of a dead pid) while a lane beside it runs."""
    from iris.heap.cpu import SHM_DIR

    try:
        if os.lstat(os.path.join(SHM_DIR, name)).st_uid != os.getuid():
            return True
    except FileNotFoundError:  # removed since it was listed: not left behind
        return True
    found = re.search(r"-p(\d+)-", name)
    if not found:
        return False
    try:
        creator = psutil.Process(int(found.group(1)))
        theirs = creator.environ().get(LANE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    return theirs != os.environ.get(LANE)


@pytest.fixture
def no_heap_files_left_behind():
    """Fail the test if it leaves iris heap files, or the race checker's shadow files of heaps, in /dev/shm (use
    with ``pytest.mark.usefixtures``)."""
    before = our_heap_files()
    yield
    left = {name for name in our_heap_files() - before if not _another_lanes(name)}
    assert left == set(), "a test left heap or shadow files in /dev/shm"


# -- the quick selection: `bash scripts/test.sh --quick` (pytest -m quick) -------------------------------------
# One or two fast tests per package of iris/ and workbench/, each calling into that package (multi-rank ones
# included), so that the inner loop touches every package in a few minutes. Curated by hand from the suite's
# --durations; tests/test_quick.py fails when a package has no entry here, or an entry names no test.
QUICK = {
    "iris": ["tests/test_heap.py::test_creation_family_and_offsets_agree[2]",
             "tests/test_device.py::test_spin_lock_ring_messages_as_remote_and_read_from_peer",
             "tests/test_layers.py::test_the_contracts_hold",
             "tests/test_layers.py::test_no_module_imports_itself_back"],
    "iris.base": ["tests/test_versions.py"],
    "iris.bench": ["tests/test_bench.py::test_run_benchmarks_inside_existing_contexts"],
    "iris.ccl": ["tests/test_ccl.py::test_all_gather_all_to_all_reduce_scatter[2]",
                 "tests/test_tuning.py::test_table_rows_by_size", "tests/test_tuning.py::test_the_switches"],
    "iris.distributed": ["tests/test_distributed.py::test_refusals_name_the_rank_and_leave_the_group_working",
                         "tests/test_compiled_collectives.py::test_fake_rules_give_shapes_without_a_context"],
    "iris.heap": ["tests/test_heap.py::test_heap_files_are_private_and_unlinked_once_mapped"],
    "iris.heap.cuda": ["tests/test_topology.py::test_records_survive_the_exchange_and_pci_ids_normalise",
                       "tests/test_layers.py::test_the_cuda_driver_only_in_the_heaps_cuda_backend"],
    "iris.heap.topology": ["tests/test_topology.py::test_map_of_hand_made_records_answers_every_question"],
    "iris.instruments": ["tests/test_traffic.py::test_lesson_13_first_kernel_sends_each_tile_once"],
    "iris.instruments.checking": ["tests/test_races.py::test_world_of_one_reports_and_forgets",
                                  "tests/test_races.py::test_relaxed_flag_names_the_data_race"],
    "iris.instruments.stepping": [
        "tests/test_stepping.py::test_message_passing_under_a_scripted_order_with_every_heap_checked_between_steps"],
    "iris.instruments.tracing": ["tests/test_tracing.py::test_user_events_in_an_untraced_kernel_touch_nothing"],
    "iris.instruments.traffic": ["tests/test_traffic.py::test_lesson_13_first_kernel_sends_each_tile_once"],
    "iris.interpret": ["tests/test_interpret.py::test_gluon_atomics_across_programs",
                       "tests/test_interpret.py::test_patches_are_installed_once"],
    "iris.language": ["tests/test_device.py::test_spin_lock_ring_messages_as_remote_and_read_from_peer"],
    "iris.ops": ["tests/test_ops.py::test_pieces_follow_the_shape"],
    "iris.perf": ["tests/test_perf.py::test_roofline_picture_leaves_out_candidates_without_flops"],
    "iris.runtime": ["tests/test_gluon_host.py::test_every_documented_method_and_a_gluon_kernel[2]"],
    "iris.upstream": ["tests/test_gluon_host.py::test_both_module_paths_have_upstreams_names",
                      "tests/test_layers.py::test_every_upstream_path_still_imports"],
    "workbench": ["tests/test_workbench.py::test_triton_kernel_puts_into_the_next_rank"],
    "workbench.widgets": ["tests/test_widgets.py::test_block_reduction_matches_numpy_on_ragged_blocks"],
    "tests": ["tests/test_quick.py"],
}


def _quick(nodeid: str) -> bool:
    return any(nodeid == entry or nodeid.startswith(entry + "::") for entries in QUICK.values()
               for entry in entries)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _quick(item.nodeid):
            item.add_marker(pytest.mark.quick)
