"""Lesson 11, exercise: a shared expert in the combine kernel.

One solution, out of the lesson's sight: `%iris solution 11` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel --check races
# One solution.
from iris.language.flags import wait


@triton.jit
def combine_shared(context, parts, topk_w, x, shared, y, returned, epochs, H, senders, rank: tl.constexpr,
                   world: tl.constexpr, TOP_K: tl.constexpr, BLOCK_H: tl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    t = tl.program_id(0)
    epoch = tl.load(epochs + t) + 1
    cols, ks = tl.arange(0, BLOCK_H), tl.arange(0, BLOCK_H)
    row = tl.load(x + t * H + ks, mask=ks < H, other=0.0)     # the shared expert first: no need to wait for it
    w = tl.load(shared + ks[:, None] * H + cols[None, :], mask=(ks[:, None] < H) & (cols[None, :] < H), other=0.0)
    total = tl.sum(row[:, None].to(tl.float32) * w.to(tl.float32), axis=0)
    wait(ctx, returned, epoch * senders)
    for j in tl.static_range(TOP_K):
        part = tl.load(parts + (t * TOP_K + j) * H + cols, mask=cols < H).to(tl.float32)
        total += tl.load(topk_w + t * TOP_K + j) * part
    tl.store(y + t * H + cols, total.to(y.dtype.element_ty), mask=cols < H)
    tl.store(epochs + t, epoch)


shared = torch.randn(H, H, generator=torch.Generator().manual_seed(7)) / H ** 0.5   # the same on every rank
y_shared = ctx.zeros(T, H, name="y_shared")


def layer_with_shared_expert():
    moe.send_to_experts(x, topk_ids)
    combine_shared[(T,)](ctx.get_device_context(), moe.parts, topk_w, x, shared, y_shared, moe.returned,
                         moe.epochs[2], H, world_size * moe.expert_programs, rank, world_size, TOP_K=TOP_K,
                         BLOCK_H=triton.next_power_of_2(H))


layer_with_shared_expert()
