"""Lesson 05, exercise: a Gluon get from the peer.

One solution, out of the lesson's sight: `%iris solution 05` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
got = ctx.zeros(256, name="got")

@gluon.jit
def get_from_peer(IrisDeviceCtx: gl.constexpr, context_tensor, buf, got, peer, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=gl.CoalescedLayout())
    ctx.get(buf + offs, got + offs, peer)

ctx.barrier()
get_from_peer[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, got, (rank + 1) % world_size, BLOCK=256)
