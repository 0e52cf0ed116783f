"""Lesson 12, exercise: flash-decode over a cache that is not full.

One solution, out of the lesson's sight: `%iris solution 12` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel --check races
# One solution.
from flash_decode_ranks import combine, send_partial

LENGTHS = [S_LOCAL] * (world_size - 1) + [37]               # valid tokens on each rank
K_ragged, V_ragged = K.clone(), V.clone()
K_ragged[LENGTHS[rank]:] = float("nan")                    # slots not written yet
V_ragged[LENGTHS[rank]:] = float("nan")

@triton.jit
def partial_attention_ragged(q, K, V, head, first, last, scale, H: tl.constexpr, D: tl.constexpr,
                             BLOCK_S: tl.constexpr):
    """partial_attention for any [first, last): the tokens past `last` are masked out."""
    d = tl.arange(0, D)
    q_h = tl.load(q + head * D + d).to(tl.float32)
    m = float("-inf")
    l = 0.0
    acc = tl.zeros((D,), tl.float32)
    for start in range(first, last, BLOCK_S):
        tokens = start + tl.arange(0, BLOCK_S)
        valid = tokens < last
        kv = (tokens[:, None] * H + head) * D + d[None, :]
        k = tl.load(K + kv, mask=valid[:, None], other=0.0).to(tl.float32)
        scores = tl.where(valid, tl.sum(k * q_h[None, :], axis=1) * scale, float("-inf"))   # exp(-inf) = 0
        m_new = tl.maximum(m, tl.max(scores, axis=0))
        rescale = tl.exp(m - m_new)
        p = tl.exp(scores - m_new)
        v = tl.load(V + kv, mask=valid[:, None], other=0.0).to(tl.float32)
        l = l * rescale + tl.sum(p, axis=0)
        acc = acc * rescale + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    return acc / l, m + tl.log(l)


@triton.jit
def flash_decode_ragged(q, K, V, partial_o, partial_lse, arrived, out, epoch, length, scale, cur_rank,
                        heap_bases, HOME: tl.constexpr, WORLD: tl.constexpr, SPLITS: tl.constexpr,
                        H: tl.constexpr, D: tl.constexpr, BLOCK_S: tl.constexpr, SEND_SEM: tl.constexpr,
                        WAIT_SEM: tl.constexpr):
    head, split = tl.program_id(0), tl.program_id(1)
    chunk = tl.cdiv(length, SPLITS)                                  # the last split may be shorter
    first = split * chunk
    last = tl.minimum(first + chunk, length)
    o, lse = partial_attention_ragged(q, K, V, head, first, last, scale, H, D, BLOCK_S)
    slot = cur_rank * SPLITS + split
    send_partial(o, lse, partial_o, partial_lse, arrived, slot, head, cur_rank, heap_bases, HOME, H, D, SEND_SEM)
    if (cur_rank == HOME) & (split == SPLITS - 1):
        expected = WORLD * SPLITS * tl.load(epoch)
        combine(partial_o, partial_lse, arrived, out, head, expected, WORLD * SPLITS, H, D, WAIT_SEM)


decode(out, q, K_ragged, V_ragged, length=LENGTHS[rank], kernel=flash_decode_ragged)
