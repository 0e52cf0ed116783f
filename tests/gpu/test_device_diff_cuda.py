"""The randomized device-op cases of tests/test_device_diff.py on GPUs and on the CPU interpreter of the same machine,
compared bit for bit (issue 31).

Both runs use 2 ranks (one per GPU where there are two) and the same seeded cases (tests/diff_device_cases.py).
Each run is checked against the host reference; the two runs are then compared case by case: every buffer and
output bit for bit (but a float add's NaN, whose bits are the machine's), except where the order of atomic
updates from two ranks is free (the old values of such updates, and the final value of an exchange or
compare-and-swap), where each run must only be explained by some order. Every difference is printed as a
markdown table (for RESULTS.md) and written to ``$IRIS_DIFF_TABLE`` if set; the test fails if the table has a row.

``IRIS_DIFF_SEED`` fixes the seed (fresh otherwise, printed), ``IRIS_DIFF_COUNT`` the number of cases (600 by
default: each distinct case compiles a kernel on the GPU, about 0.3 s), ``IRIS_DIFF_CASE`` runs a few alone.
"""

from __future__ import annotations

import datetime
import os

import pytest
import torch

from tests import diff_device_cases as cases
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BACKENDS = {"cuda": {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"},
            "interpreter": {"IRIS_TEST_BACKEND": "cpu", "IRIS_BACKEND": "cpu"}}
ORDER_FREE_FINALS = ("xchg", "cas")  # two ranks' exchanges end with whichever came last


def _run(env, seed, count, only) -> list:
    return cases.by_rank(run_ranks(2, "tests.diff_device_cases:run_cases", seed, count, only, timeout=580, env=env))


def _differences(case, gpu, cpu) -> list:
    """(what, GPU, interpreter) for each way the two runs of ``case`` differ beyond what the order may change."""
    number = case["number"]
    rows = []
    for rank in (0, 1):
        a, b = gpu[rank][number], cpu[rank][number]
        if (cases.REFUSED in a) != (cases.REFUSED in b):
            rows.append((f"rank {rank} refused", a.get(cases.REFUSED, "ran"), b.get(cases.REFUSED, "ran")))
            continue
        if cases.REFUSED in a:
            continue
        if not case["shared"] or case["op"] not in ORDER_FREE_FINALS:
            lanes = cases.differing_lanes(case, a["buf"], b["buf"])
            if lanes:
                rows.append((f"rank {rank} buffer at {lanes}", [a["buf"][i] for i in lanes],
                             [b["buf"][i] for i in lanes]))
        if not case["shared"]:
            lanes = cases.differing_lanes(case, a["out"], b["out"])
            if lanes:
                rows.append((f"rank {rank} output at {lanes}", [a["out"][i] for i in lanes],
                             [b["out"][i] for i in lanes]))
    for name, run in (("GPU", gpu), ("interpreter", cpu)):
        why = cases.check_case(case, [run[0][number], run[1][number]])
        if why:
            rows.append((f"{name} against the reference", why, ""))
    return rows


def test_device_ops_agree_on_the_gpu_and_the_interpreter(capsys):
    seed, count, only = cases.run_selection(600)
    chosen = cases.make_cases(seed, count, only)
    gpu = _run(BACKENDS["cuda"], seed, count, only)
    cpu = _run(BACKENDS["interpreter"], seed, count, only)
    rows = [(case, *row) for case in chosen for row in _differences(case, gpu, cpu)]
    device = torch.cuda.get_device_name(0)
    header = (f"Device ops, GPU against the CPU interpreter: seed {seed}, {len(chosen)} cases, 2 ranks on "
              f"{torch.cuda.device_count()} x {device}, {datetime.date.today()}: {len(rows)} differences")
    table = [header, "", "| case | what | GPU | interpreter | differs in |", "|---|---|---|---|---|"]
    table += [f"| {case['number']} | {cases.describe(case)} | {g} | {c} | {what} |" for case, what, g, c in rows]
    text = "\n".join(table)
    with capsys.disabled():
        print("\n" + text)
    if os.environ.get("IRIS_DIFF_TABLE"):
        with open(os.environ["IRIS_DIFF_TABLE"], "w") as out:
            out.write(text + "\n")
    assert not rows, text
