"""The flag slots of the collectives that exchange twice per call (all_gather's pull, all_to_all) and of
point-to-point: one module, so that each kernel and its Gluon twin read the same numbers without importing each
other.

A rank signals ``ARRIVED`` once its input is readable and ``DONE`` once it no longer reads its peers' inputs; the
workspace holds ``SLOTS`` flags per source rank and program (:mod:`iris.language.sync`). Kernels read only
constexpr globals, hence ``tl.constexpr``.

Examples
--------
>>> int(ARRIVED), int(DONE), SLOTS
(0, 1, 2)
"""

import triton.language as tl

ARRIVED, DONE = tl.constexpr(0), tl.constexpr(1)
SLOTS = 2
# Point-to-point's (iris.ccl.p2p): a message landed (the receiver's flag); a slot was emptied (the sender's).
FULL, FREE = tl.constexpr(0), tl.constexpr(1)
