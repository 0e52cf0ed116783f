"""Upstream Iris's names on a CUDA GPU: the device clock and its rate, ``iris.do_bench``, AMD-only launch options
and Gluon layouts for 64-wide warps.

The clock is checked against the host's: a kernel that spins until ``read_realtime()`` has advanced by a given
number of nanoseconds must take that long by CUDA events, and ``do_bench`` must report it.
Run on a GPU machine (``python -m pytest tests/gpu/test_upstream_cuda.py``).
"""

import warnings

import pytest
import torch
import triton
import triton.language as tl
from iris.device.utils import get_xcc_id, read_realtime
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
from iris.base import warning_site
from iris.base.launch_options import AMDOnlyOptionWarning
from iris.language.warp_width import WarpWidthNote
from tests.launch_option_kernels import scale

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@triton.jit
def spin(out, ns):
    start = read_realtime()
    now = start
    while now - start < ns:
        now = read_realtime()
    tl.store(out, now - start + get_xcc_id())


@triton.jit
def stamp(out):
    tl.store(out, read_realtime())


@gluon.jit
def amd_layout_copy(src, out, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [64], [1], [0])  # upstream's Gluon examples: 64-wide warps
    offs = gl.arange(0, BLOCK, layout=layout)
    gl.store(out + offs, gl.load(src + offs) + 1.0)


def test_read_realtime_counts_at_the_rate_hip_reports():
    # Two stamps around a sleep, all bracketed by CUDA events and enqueued back to back (compiled first, so no
    # host delay comes between): the stamps' interval at the reported rate must match the events' interval.
    first, second = (torch.zeros(1, dtype=torch.int64, device="cuda") for _ in range(2))
    stamp[(1,)](first)
    torch.cuda.synchronize()
    events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    events[0].record()
    stamp[(1,)](first)
    torch.cuda._sleep(50_000_000)  # tens of milliseconds of GPU time
    stamp[(1,)](second)
    events[1].record()
    torch.cuda.synchronize()
    device_ms = (second - first).item() / iris.hip.get_wall_clock_rate(0)
    events_ms = events[0].elapsed_time(events[1])
    assert events_ms > 5 and events_ms * 0.98 - 0.1 <= device_ms <= events_ms + 0.01, (device_ms, events_ms)


def test_do_bench_reports_a_kernel_of_known_length_and_keeps_ranks_in_step():
    out = torch.zeros(1, dtype=torch.int64, device="cuda")
    barriers = []
    times = iris.do_bench(lambda: spin[(1,)](out, 2_000_000), barrier_fn=lambda: barriers.append(1), n_warmup=2,
                          n_repeat=5, return_mode="all")
    assert len(times) == 5 and all(2.0 <= t < 2.5 for t in times), times  # 2 ms of the device clock
    assert out.item() >= 2_000_000
    assert len(barriers) == 2 + 2 * (2 + 5) + 1  # around the first call, twice per call, once at the end
    median = iris.do_bench(lambda: spin[(1,)](out, 1_000_000), n_warmup=1, n_repeat=3, quantiles=[0.5])
    assert 1.0 <= median < 1.5


def test_amd_only_launch_options_are_dropped_with_one_warning_each(monkeypatch):
    monkeypatch.setattr(warning_site, "_said", set())  # "once per process": as if no launch had said it yet
    src = torch.arange(256, dtype=torch.float32, device="cuda")
    out = torch.zeros_like(src)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            scale[(2,)](src, out, 3.0, BLOCK=128, num_warps=4, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2)
    torch.cuda.synchronize()
    assert torch.equal(out, src * 3)
    dropped = sorted(str(w.message).split("=")[0].removeprefix("launch option ")
                     for w in caught if issubclass(w.category, AMDOnlyOptionWarning))
    assert dropped == ["kpack", "matrix_instr_nonkdim", "waves_per_eu"]  # once each, though launched twice


def test_gluon_layout_for_64_wide_warps_runs_on_32_wide_warps(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compiled afresh: the note comes with compiling
    monkeypatch.setattr(warning_site, "_said", set())  # "once per process": as if no compile had said it yet
    src = torch.arange(128, dtype=torch.float32, device="cuda")
    out = torch.zeros_like(src)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = amd_layout_copy[(1,)](src, out, BLOCK=128, num_warps=1)
    torch.cuda.synchronize()
    assert torch.equal(out, src + 1)
    assert "threadsPerWarp = [32]" in compiled.asm["ttgir"]
    assert [w for w in caught if issubclass(w.category, WarpWidthNote)]
