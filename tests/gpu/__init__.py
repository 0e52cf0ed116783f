"""Tests that need a CUDA GPU, run on a lent GPU machine through the device tool (tests/gpu/run_gpu_checks.sh).

``WORLD`` is how many ranks they start: ``IRIS_GPU_WORLD`` where set (ranks may share a GPU, as on the one-GPU
machine), else one rank per GPU and at least 2.
"""

import os

import torch

WORLD = int(os.environ.get("IRIS_GPU_WORLD", "0")) or max(2, torch.cuda.device_count())
