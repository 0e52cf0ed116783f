"""iris.interpret: Triton aggregates and Gluon kernels on the Triton CPU interpreter.

Every kernel result is checked against a torch reference. The kernels live in
tests/interpret_kernels.py, which activates the interpreter before defining them.
"""

import linecache
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import iris.interpret
from iris.interpret import UnsupportedOnInterpreter, version
from iris.language.core import UnsupportedAtomicError, atomic_element_types

from . import interpret_kernels as k

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_activate_is_idempotent_and_switches_triton_to_the_interpreter():
    import triton

    iris.interpret.activate()
    iris.interpret.activate()
    assert iris.interpret.is_active()
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert triton.knobs.runtime.interpret


def test_missing_triton_internals_raise_naming_them_and_the_supported_range(monkeypatch):
    needed = version.REQUIRED_TRITON_INTERNALS + (("triton.runtime.interpreter", "NoSuchThing"),)
    monkeypatch.setattr(version, "REQUIRED_TRITON_INTERNALS", needed)
    with pytest.raises(RuntimeError, match=r"triton\.runtime\.interpreter\.NoSuchThing\. iris supports triton "
                                           r"3\.6 to 3\.9\.x: pip install 'triton>=3\.6,<3\.10'"):
        version.check_triton_internals()


def test_the_installed_triton_has_every_internal_the_adapter_patches():
    assert version.missing_triton_internals() == []


def test_runtime_scalars_index_on_this_triton_and_numpy():
    # triton 3.6's own __index__ fails with numpy >= 2.4; scalar_index replaces it only there. Either way, what
    # a launch installs now reads a one-element scalar.
    from iris.interpret import scalar_index

    assert not scalar_index.index_needs_fixing()
    out = torch.zeros(8, dtype=torch.int32)
    k.fill_up_to[(1,)](out, 5)
    assert out.tolist() == [0, 1, 2, 3, 4, 0, 0, 0]


def test_patches_are_installed_once():
    from triton.runtime.interpreter import GridExecutor, InterpretedFunction
    from triton.runtime.jit import JITFunction

    from iris.base import launch_options
    from iris.base.patching import INSTALLED_MARK
    from iris.interpret import aggregate, constexpr, device_calls, gluon, guard, scalar_index
    from iris.interpret import launch_options as interpreted_launch_options

    entries = (JITFunction.run, JITFunction.__call__, GridExecutor.__init__, GridExecutor.__call__,
               InterpretedFunction.run)
    for module in (constexpr, aggregate, gluon, device_calls, scalar_index, guard, launch_options,
                   interpreted_launch_options):
        module.install()
    assert (JITFunction.run, JITFunction.__call__, GridExecutor.__init__, GridExecutor.__call__,
            InterpretedFunction.run) == entries
    assert "iris.base.launch_options.dropping_amd_only" in getattr(InterpretedFunction.run, INSTALLED_MARK)
    interpreted_wrappers, run = 0, InterpretedFunction.run
    while hasattr(run, "__wrapped__"):
        interpreted_wrappers, run = interpreted_wrappers + 1, run.__wrapped__
    assert interpreted_wrappers == len(getattr(InterpretedFunction.run, INSTALLED_MARK))  # each adapter once
    # JITFunction.run is wrapped by several adapters (the interpreter's, launch_options'), each of them once:
    # one wrapper per adapter named in the mark, and the innermost function is Triton's own
    wrappers, run = [], JITFunction.run
    while hasattr(run, "__wrapped__"):
        wrappers.append(run)
        run = run.__wrapped__
    assert not hasattr(run, INSTALLED_MARK) and run.__module__ == "triton.runtime.jit"
    adapters = getattr(JITFunction.run, INSTALLED_MARK)
    assert len(wrappers) == len(adapters) >= 2, (wrappers, adapters)
    assert "iris.base.launch_options.dropping_amd_only" in adapters


# ---------------------------------------------------------------- Gluon kernels


def test_gluon_elementwise_with_and_without_layouts():
    x = torch.randn(1000, dtype=torch.float32)
    y = torch.full_like(x, -7.0)
    k.scale_1d[(triton_cdiv(1000, 128),)](x, y, 1000, 2.5, BLOCK=128)
    torch.testing.assert_close(y, x * 2.5)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_gluon_2d_tile_with_slice_layouts_and_reductions():
    M, N = 8, 16
    x = torch.randn(M, N, dtype=torch.float32)
    row_sum, col_max, row_prod = torch.zeros(M), torch.zeros(N), torch.zeros(M)
    scaled = torch.zeros(M, N)
    k.row_col_stats[(1,)](x, row_sum, col_max, scaled, row_prod, M, N)
    torch.testing.assert_close(row_sum, x.sum(dim=1))
    torch.testing.assert_close(col_max, x.max(dim=0).values)
    torch.testing.assert_close(row_prod, x.prod(dim=1))
    torch.testing.assert_close(scaled, x * 6 + torch.where(x > 0, 0.0, -1.0))


def test_gluon_launch_facts_num_warps_and_programs():
    out = torch.zeros(3, 4, dtype=torch.int32)
    k.launch_facts[(3,)](out, torch.tensor([42.7]), 10, num_warps=8)
    expected = torch.tensor([[pid, 3, 8 + 3 * 100, 42] for pid in range(3)], dtype=torch.int32)
    assert torch.equal(out, expected)


def test_gluon_atomics_across_programs():
    programs, block = 5, 32
    values = torch.randint(1, 1 << 20, (programs, block), dtype=torch.int32)
    counter = torch.tensor([0, 0, 1 << 30, -1, 0, 0], dtype=torch.int32)
    slots = torch.full((programs,), -1, dtype=torch.int32)
    lock = torch.zeros(1, dtype=torch.int32)
    seen = torch.full((programs,), -1, dtype=torch.int32)
    k.atomics[(programs,)](counter, slots, lock, seen, values, BLOCK=block)
    flat = values.flatten().tolist()
    and_all, or_all, xor_all = -1, 0, 0
    for value in flat:
        and_all, or_all, xor_all = and_all & value, or_all | value, xor_all ^ value
    assert counter.tolist() == [programs * block, max(flat), min(flat), and_all, or_all, xor_all]
    assert slots.tolist() == [pid + 10 for pid in range(programs)]
    winners = [pid for pid, old in enumerate(seen.tolist()) if old == 0]
    assert len(winners) == 1
    assert lock.item() == winners[0] + 100
    assert all(old == lock.item() for pid, old in enumerate(seen.tolist()) if pid != winners[0])


# ---------------------------------------------------------------- constexpr spellings


@pytest.mark.parametrize("kernel", [k.triton_spellings, k.gluon_spellings], ids=["triton", "gluon"])
def test_every_constexpr_spelling_counts(kernel):
    sizes = (2, 4, 8, 16, 32)
    out = torch.zeros(sum(sizes), dtype=torch.int32)
    kernel[(1,)](out, *sizes)
    expected = torch.cat([torch.full((size,), code) for code, size in enumerate(sizes, start=1)])
    assert torch.equal(out, expected.to(torch.int32))


# ---------------------------------------------------------------- aggregates


def toy_heaps(world_size, size):
    """Per-rank heaps and a context tensor [rank, world, heap_base_0, ...] for rank 0."""
    heaps = [torch.randn(size, dtype=torch.float32) for _ in range(world_size)]
    bases = [heap.data_ptr() for heap in heaps]
    context = torch.tensor([0, world_size, *bases], dtype=torch.int64)
    return heaps, context


def test_triton_aggregate_passed_as_constexpr_class():
    heaps, context = toy_heaps(world_size=3, size=64)
    out = torch.zeros(64)
    k.triton_read_peer[(1,)](k.TritonRankContext, context, heaps[0], out, 0.5, 50,
                             rank=0, world_size=3, peer=2, BLOCK=64)
    torch.testing.assert_close(out[:50], heaps[2][:50] * 0.5 + 3)
    assert torch.all(out[50:] == 0)


def test_gluon_aggregate_passed_as_constexpr_class():
    heaps, context = toy_heaps(world_size=2, size=32)
    # the last word of every toy heap is an int32 counter, at the same offset in each heap
    counters = [heap[-1:].view(torch.int32) for heap in heaps]
    for counter in counters:
        counter.zero_()
    out = torch.zeros(16)
    k.gluon_read_and_count[(3,)](k.GluonRankContext, context, heaps[0], out, counters[0], peer=1, BLOCK=16)
    torch.testing.assert_close(out, heaps[1][:16] + 2)
    assert counters[1].item() == 3 * 16
    assert counters[0].item() == 0


# ---------------------------------------------------------------- source registered in linecache


def test_kernels_from_exec_of_linecache_registered_source():
    source = textwrap.dedent(
        """
        import triton
        import triton.language as tl
        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl

        @triton.jit
        def triton_cell_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            three = 3  # rewritten to a tensor only if the interpreter found this source
            tl.store(y_ptr + offs, tl.load(x_ptr + offs) * three.to(tl.float32))

        @gluon.jit
        def gluon_cell_kernel(x_ptr, y_ptr, BLOCK: gl.constexpr):
            offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
            four = 4
            gl.store(y_ptr + offs, gl.load(x_ptr + offs) + four.to(gl.float32))
        """
    )
    namespace = register_and_exec(source, "<iris-cell-test_interpret-1>")
    x = torch.randn(64)
    y = torch.zeros(64)
    namespace["triton_cell_kernel"][(1,)](x, y, BLOCK=64)
    torch.testing.assert_close(y, x * 3)
    namespace["gluon_cell_kernel"][(1,)](x, y, BLOCK=64)
    torch.testing.assert_close(y, x + 4)


def register_and_exec(source, filename):
    """What the workbench does with a cell: register its source in linecache, then exec it."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"__name__": filename.strip("<>")}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def test_gluon_helper_from_a_module_that_imports_only_gl():
    helpers = register_and_exec(
        textwrap.dedent(
            """
            from triton.experimental import gluon
            from triton.experimental.gluon import language as gl

            @gluon.jit
            def plus_one(x):
                return x + 1
            """
        ),
        "<iris-cell-only-gl>",
    )
    x = torch.arange(32, dtype=torch.float32)
    y = torch.zeros(32)
    k.apply_helper[(1,)](x, y, helpers["plus_one"], BLOCK=32)
    torch.testing.assert_close(y, x + 1)


def test_device_calls_reuse_the_launchs_triton_language_and_the_launch_restores_it():
    # lang_once_per_launch: device functions skip re-binding triton.language inside a launch. The helper's module
    # also sees triton.language.core, which the kernel's does not, so its first call binds that (triton's own
    # _patch_lang, which never unbinds it: restored here by hand) and its later calls bind nothing.
    import triton.language as tl
    from triton.language import core

    from iris.interpret import lang_once_per_launch

    assert lang_once_per_launch.repatching_changes_nothing()
    helper = register_and_exec(
        textwrap.dedent(
            """
            import triton
            import triton.language as tl
            from triton.language import core

            @triton.jit
            def add_row_twice(acc, x_ptr, row, BLOCK: tl.constexpr):
                for _ in core.static_range(2):
                    acc += tl.load(x_ptr + row * BLOCK + core.arange(0, BLOCK))
                return acc
            """
        ),
        "<iris-cell-helper-seeing-core>",
    )["add_row_twice"]
    kernel_module = register_and_exec(
        textwrap.dedent(
            """
            import triton
            import triton.language as tl

            @triton.jit
            def sum_rows_twice(x_ptr, out_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
                acc = tl.zeros([BLOCK], dtype=tl.float32)
                for row in range(ROWS):
                    acc = add_row_twice(acc, x_ptr, row, BLOCK)
                    note_bindings()
                tl.store(out_ptr + tl.arange(0, BLOCK), acc)
            """
        ),
        "<iris-cell-kernel-seeing-tl>",
    )
    bindings = []
    kernel_module["add_row_twice"] = helper
    kernel_module["note_bindings"] = lambda: bindings.append((tl.dtype.to_ir, tl.range, core.arange, core.range))
    before = (tl.dtype.to_ir, tl.range, tl.load, dict(vars(core)))
    x = torch.randn(5, 16)
    out = torch.zeros(16)
    try:
        kernel_module["sum_rows_twice"][(1,)](x, out, ROWS=5, BLOCK=16)
    finally:
        leaked_by_triton = {name: value for name, value in before[3].items() if vars(core).get(name) is not value}
        for name, value in leaked_by_triton.items():
            setattr(core, name, value)
    torch.testing.assert_close(out, 2 * x.sum(0))
    assert len(bindings) == 5 and len(set(bindings)) == 1  # bound once for the launch, not at each call
    assert bindings[0][0] is not before[0]  # bound during the launch (core.arange may be bound by earlier tests)
    assert (tl.dtype.to_ir, tl.range, tl.load) == before[:3] and tl.core.is_builtin(tl.load)


# ---------------------------------------------------------------- not emulated


@pytest.mark.parametrize(
    "kernel, feature",
    [
        (k.uses_shared_memory, "gl.allocate_shared_memory"),
        (k.uses_warp_specialize, "gl.warp_specialize"),
        (k.uses_hopper_fence, "nvidia.hopper.fence_async_shared"),
    ],
)
def test_gpu_only_gluon_features_raise_unsupported(kernel, feature):
    import triton.experimental.gluon.language as gl
    import triton.experimental.gluon.language._core as gl_core

    x = torch.zeros(32)
    with pytest.raises(UnsupportedOnInterpreter, match="Run this kernel on a GPU") as info:
        kernel[(1,)](x, 32) if kernel is k.uses_shared_memory else kernel[(1,)](x)
    assert feature in str(info.value)
    assert links_of(info.value) == [info.value]  # raised in the interpreter's wrappers' place, not linked to them
    assert gl.arange is gl_core.arange  # the launch's patches were undone


def links_of(error) -> list:
    """Every exception reachable from ``error`` through ``__cause__`` and ``__context__`` (``error`` first), as a
    logger or a test tool walks them; fails on an exception reached twice (a cycle: the walk would never end)."""
    reached, todo = [], [error]
    while todo:
        current = todo.pop()
        assert all(current is not seen for seen in reached), f"{current!r} is reached twice from {error!r}"
        reached.append(current)
        todo += [link for link in (current.__cause__, current.__context__) if link is not None]
    return reached


# The element types Triton's atomics refuse for some op, as torch dtypes named as iris.language.core names them.
SMALL_ELEMENTS = {torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.uint16: "uint16",
                  torch.float16: "fp16", torch.bfloat16: "bf16"}
REFUSED_ATOMICS = [(op, dtype) for op in ("add", "sub", "xchg", "xor", "and", "or", "min", "max", "cas")
                   for dtype, element in SMALL_ELEMENTS.items() if element not in atomic_element_types(op)]


@pytest.mark.parametrize("op, dtype", REFUSED_ATOMICS, ids=[f"{op}-{str(dtype)[6:]}" for op, dtype in REFUSED_ATOMICS])
def test_a_refused_atomic_raises_its_own_error_whose_chain_ends(op, dtype):
    """The interpreter wraps the refusal in InterpreterErrors that keep it as their cause; raised in their place, it
    must not link back to them, or walking its causes and contexts never ends."""
    target = torch.zeros(4, dtype=dtype)
    with pytest.raises(UnsupportedAtomicError) as raised:
        k.iris_atomic[(1,)](target, torch.zeros(1, dtype=torch.int64), OP=op)
    assert str(raised.value).startswith(f"iris.atomic_{op} on {SMALL_ELEMENTS[dtype]}"), raised.value
    assert links_of(raised.value) == [raised.value]  # nothing under it: the wrappers said only its message again


# ---------------------------------------------------------------- kernels decorated before activate()

STALE_KERNEL_SCRIPT = """
import os, sys
assert "TRITON_INTERPRET" not in os.environ
import torch, triton, triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

@triton.jit
def stale_triton(x_ptr):
    tl.store(x_ptr, 1.0)

@gluon.jit
def stale_gluon(x_ptr):
    gl.store(x_ptr, 1.0)

import iris.interpret
iris.interpret.activate()

for kernel in (stale_triton, stale_gluon):
    try:
        kernel[(1,)](torch.zeros(1))
    except RuntimeError as error:
        print("MESSAGE:", error)

# triton was imported before activate(): tl.sum and gl.sum are compiled-path helpers; they still run.
@triton.jit
def fresh_triton(x_ptr, out_ptr, N: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, N)), axis=0))

@gluon.jit
def fresh_gluon(x_ptr, out_ptr, N: gl.constexpr):
    gl.store(out_ptr, gl.sum(gl.load(x_ptr + gl.arange(0, N)), axis=0))

x = torch.arange(8, dtype=torch.float32)
for kernel in (fresh_triton, fresh_gluon):
    out = torch.zeros(1)
    kernel[(1,)](x, out, N=8)
    print("SUM:", out.item())
"""


def test_stale_kernel_guard_names_the_kernel_and_the_cure(tmp_path):
    script = tmp_path / "stale_kernels.py"
    script.write_text(STALE_KERNEL_SCRIPT)
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    messages = [line for line in result.stdout.splitlines() if line.startswith("MESSAGE:")]
    assert len(messages) == 2, result.stdout
    script_lines = STALE_KERNEL_SCRIPT.splitlines()
    for message, name, decorator in zip(
        messages, ("stale_triton", "stale_gluon"), ("@triton.jit", "@gluon.jit"), strict=True
    ):
        line = script_lines.index(decorator) + 1  # the first use of each decorator is the stale kernel
        assert f"'{name}'" in message
        assert f"{script}:{line}" in message
        assert decorator in message
        assert "TRITON_INTERPRET=1" in message and "import iris" in message and "re-run" in message
    assert [line for line in result.stdout.splitlines() if line.startswith("SUM:")] == ["SUM: 28.0"] * 2


def test_cpu_context_after_a_gpu_import_says_what_breaks_and_what_to_do():
    # What a GPU machine does when `import iris` chose cuda and a context then asks for the CPU: here, with
    # IRIS_BACKEND=cuda at import on a machine without a GPU (import iris then leaves the interpreter off).
    code = textwrap.dedent("""
        import warnings
        import iris
        assert not iris.interpret.is_active()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ctx = iris.iris("1MiB", backend="cpu")
        print([str(w.message) for w in caught if w.category is RuntimeWarning])
    """)
    env = {**os.environ, "IRIS_BACKEND": "cuda", "PYTHONPATH": ROOT}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Set IRIS_BACKEND=cpu before importing iris" in done.stdout and "DeviceContext" in done.stdout


def test_an_observer_removed_during_a_launch_hears_no_more_of_it():
    # The garbage collector may close a race checker whose context is gone while another context's kernel runs;
    # the closed checker must not be told that launch finished (its shadow files are closed).
    from iris.interpret import access_events

    heard = []

    class Listener:
        def __init__(self, name, removes=None):
            self.name, self.removes = name, removes

        def launch_started(self, kernel):
            heard.append((self.name, "started"))

        def launch_finished(self):
            heard.append((self.name, "finished"))

        def program_started(self, program_id, grid):
            if self.removes is not None:
                access_events.remove_observer(self.removes)

        def access(self, kind, addresses, mask, itemsize):
            pass

        def atomic(self, kind, addresses, mask, itemsize, sem, perform):
            return perform()[0]

    closed = Listener("closed")
    closer = Listener("closer", removes=closed)
    access_events.add_observer(closed)
    access_events.add_observer(closer)
    try:
        k.fill_up_to[(1,)](torch.zeros(4, dtype=torch.int32), 2)
    finally:
        access_events.remove_observer(closer)
        access_events.remove_observer(closed)
    assert heard == [("closed", "started"), ("closer", "started"), ("closer", "finished")]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_a_masked_load_fills_with_its_other_bit_for_bit(dtype):
    # a one-element other of -0.0 (or 0) once counted as no other: its masked lanes read +0.0, where a GPU reads -0.0
    from iris.interpret import masked_load_other

    assert not masked_load_other.drops_negative_zero()
    for block, n in ((1, 0), (1, 1), (4, 1), (4, 0)):
        for fill in (-0.0, 0.0, -7.0, 2.5):
            if not dtype.is_floating_point and fill != int(fill):
                continue
            src = (torch.arange(block) + 1).to(dtype)
            out = torch.full((block,), 9, dtype=dtype)
            k.masked_load_with_other[(1,)](src, torch.tensor([fill]).to(dtype), out, n, BLOCK=block)
            want = torch.where(torch.arange(block) < n, src, torch.tensor(fill).to(dtype))
            bits = torch.int16 if dtype.itemsize == 2 else torch.int32 if dtype.itemsize == 4 else torch.int64
            assert torch.equal(out.view(bits), want.view(bits)), (dtype, block, n, fill, out, want)


def test_minimum_and_maximum_of_a_nan_and_a_number_give_the_number_as_on_a_gpu():
    # minnum/maxnum (the default) return the number (PTX min.f32); propagate_nan=ALL returns the NaN.
    from iris.interpret import number_min_max

    assert not number_min_max.minnum_returns_nan()
    nan = float("nan")
    x, y = torch.tensor([nan, 1.0, nan, 2.0]), torch.tensor([1.0, nan, nan, 3.0])
    out = torch.empty(3, 4)
    k.minimum_maximum[(1,)](x, y, out, BLOCK=4)
    assert out[0, [0, 1, 3]].tolist() == [1.0, 1.0, 2.0] and out[1, [0, 1, 3]].tolist() == [1.0, 1.0, 3.0]
    assert torch.isnan(out[:2, 2]).all() and torch.isnan(out[2, :3]).all() and out[2, 3].item() == 2.0
