"""Lesson 17, exercise: DDP's bucket size.

One solution, out of the lesson's sight: `%iris solution 17` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution: 6 KiB. The head's gradients (2,176 bytes) are under it, and with block 1's down over it (6,336): the
# first bucket closes, reduced before block 0's backward. Block 1's up (4,352) is under it, and with block 0's down
# over it (8,512): the second closes, reduced before block 0's up's backward. What is left, block 0's up and the
# embedding (6,400 bytes), is the third, after the backward. Anything from 4,417 to 6,592 bytes passes; from 4,353 to
# 4,416, block 0's down bias (64 bytes) closes the second bucket early, and a fourth follows.
BUCKET_MB = 6 / 1024
yours = training.Run("DDP", group, rank, bucket_cap_mb=BUCKET_MB)
for _ in range(3):                               # 1: one bucket; 2: the buckets rebuilt; 3: as they stay
    yours.step()
if rank == 0:
    print(f"step 3:\n{training.collectives(yours.steps[-1])}")
