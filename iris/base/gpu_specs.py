"""What a GPU can do on paper: the spec sheet of the common data-centre parts, one table, one place.

Every figure is a **dense** one (no 2:4 structured sparsity: vendors print the sparse figure, twice the dense
one, in large type), for one GPU, from NVIDIA's datasheets:

- "NVIDIA H100 Tensor Core GPU" datasheet (H100 SXM, H100 PCIe, H100 NVL columns);
- "NVIDIA H200 Tensor Core GPU" datasheet (H200 SXM, H200 NVL columns);
- "NVIDIA GH200 Grace Hopper Superchip" datasheet (the GPU's figures; HBM3 96 GB part);
- "NVIDIA A100 Tensor Core GPU" datasheet (A100 40GB/80GB PCIe and SXM columns);
- "NVIDIA HGX B200" / "DGX B200" datasheets (eight-GPU figures divided by eight);
- "NVIDIA L40S", "NVIDIA L4", "NVIDIA A10 Tensor Core GPU" datasheets.

Bandwidths are in GB/s (10**9 bytes per second). ``peer_gbs`` is **one direction** of the link between two GPUs:
NVLink's datasheet figure is the total of both directions over all links, so it is halved here (H100 SXM:
900 GB/s -> 450). Parts without NVLink reach a peer over PCIe (Gen4 x16: 32 GB/s a direction); PCIe cards
with an NVLink bridge list the bridge. fp64 is the tensor-core FP64 figure where the part has one.

Examples
--------
>>> find("NVIDIA H200").hbm_gbs
4800.0
>>> find("NVIDIA H100 80GB HBM3").peak_tflops["bf16"]
989.5
>>> find("NVIDIA GeForce RTX 4090") is None
True
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's spec-sheet figures (dense, per GPU).

    Attributes
    ----------
    name : str
        The part, e.g. ``"H100 SXM"``.
    peak_tflops : dict
        Dense peak TFLOP/s per dtype name (``"fp64"``, ``"fp32"``, ``"tf32"``, ``"bf16"``, ``"fp16"``,
        ``"fp8"``), only those the part has.
    hbm_gbs : float
        Device-memory bandwidth, GB/s (reads and writes together, as the datasheet counts it).
    peer_gbs : float
        Bandwidth to one peer GPU, GB/s, one direction.
    peer_link : str
        What carries it (``"NVLink 4"``, ``"PCIe Gen4 x16"``...).
    sm_count : int
        Streaming multiprocessors.

    Examples
    --------
    >>> find("NVIDIA A100-SXM4-80GB").peak("bfloat16")
    312.0
    """

    name: str
    peak_tflops: dict = field(hash=False)
    hbm_gbs: float
    peer_gbs: float
    peer_link: str
    sm_count: int

    def peak(self, dtype) -> float | None:
        """Dense peak TFLOP/s for ``dtype`` (a torch dtype or its name), None where the part has no such unit.

        Examples
        --------
        >>> import torch
        >>> find("NVIDIA H200").peak(torch.float8_e4m3fn)
        1979.0
        """
        return self.peak_tflops.get(dtype_key(dtype))


def dtype_key(dtype) -> str:
    """The spec table's name for a torch dtype or a name (``torch.bfloat16`` -> ``"bf16"``).

    Examples
    --------
    >>> dtype_key("float16"), dtype_key("fp8")
    ('fp16', 'fp8')
    """
    name = str(dtype).removeprefix("torch.")
    if name.startswith("float8"):
        return "fp8"
    return {"float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
            "float16": "fp16", "half": "fp16"}.get(name, name)


def _hopper(name, hbm_gbs, peer_gbs, peer_link, fp64, fp32, tf32, bf16, fp8, sm_count=132) -> GpuSpec:
    return GpuSpec(name, {"fp64": fp64, "fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": bf16, "fp8": fp8},
                   hbm_gbs, peer_gbs, peer_link, sm_count)


def _ampere(name, hbm_gbs, peer_gbs, peer_link) -> GpuSpec:
    return GpuSpec(name, {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
                   hbm_gbs, peer_gbs, peer_link, 108)


PCIE4 = 32.0  # PCIe Gen4 x16, one direction

# (pattern matched against torch.cuda.get_device_name, the part). First match wins: specific names first
# (GH200 before H200, the PCIe/NVL variants before the SXM default, A100 before A10, L40S before L4).
SPECS: tuple[tuple[str, GpuSpec], ...] = (
    (r"GH200", _hopper("GH200", 4000.0, 450.0, "NVLink 4", 67.0, 67.0, 494.5, 989.5, 1979.0)),
    (r"H200.*NVL", _hopper("H200 NVL", 4800.0, 450.0, "NVLink bridge", 60.0, 60.0, 417.5, 835.5, 1670.5)),
    (r"H200", _hopper("H200 SXM", 4800.0, 450.0, "NVLink 4", 67.0, 67.0, 494.5, 989.5, 1979.0)),
    (r"H100.*NVL", _hopper("H100 NVL", 3900.0, 300.0, "NVLink bridge", 60.0, 60.0, 417.5, 835.5, 1670.5)),
    (r"H100.*PCIE", _hopper("H100 PCIe", 2000.0, 300.0, "NVLink bridge", 51.0, 51.0, 378.0, 756.0, 1513.0,
                            sm_count=114)),
    (r"H100", _hopper("H100 SXM", 3350.0, 450.0, "NVLink 4", 67.0, 67.0, 494.5, 989.5, 1979.0)),
    (r"A100.*PCIE.*40|A100.*40.*PCIE", _ampere("A100 PCIe 40GB", 1555.0, 300.0, "NVLink bridge")),
    (r"A100.*PCIE", _ampere("A100 PCIe 80GB", 1935.0, 300.0, "NVLink bridge")),
    (r"A100.*40", _ampere("A100 SXM 40GB", 1555.0, 300.0, "NVLink 3")),
    (r"A100", _ampere("A100 SXM 80GB", 2039.0, 300.0, "NVLink 3")),
    # The HGX B200 datasheet gives no plain FP32 figure: left out rather than guessed.
    (r"B200", GpuSpec("B200", {"fp64": 37.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
                      8000.0, 900.0, "NVLink 5", 148)),
    (r"L40S", GpuSpec("L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
                      864.0, PCIE4, "PCIe Gen4 x16", 142)),
    (r"\bL4\b", GpuSpec("L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
                        300.0, PCIE4, "PCIe Gen4 x16", 58)),
    (r"\bA10\b", GpuSpec("A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
                         600.0, PCIE4, "PCIe Gen4 x16", 72)),
)


def find(device_name: str, warn: bool = True) -> GpuSpec | None:
    """The spec of the GPU called ``device_name`` (``torch.cuda.get_device_name()``'s string), or None with a
    warning saying the part is not in the table (so no spec roof is drawn; measured ceilings still are), unless
    ``warn`` is False (a caller with a fallback of its own).

    Examples
    --------
    >>> find("NVIDIA H100 PCIe").name, find("NVIDIA A10").name, find("NVIDIA A100-PCIE-40GB").name
    ('H100 PCIe', 'A10', 'A100 PCIe 40GB')
    """
    for pattern, spec in SPECS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return spec
    if not warn:
        return None
    known = ", ".join(spec.name for _, spec in SPECS)
    warnings.warn(f"no spec sheet for GPU {device_name!r} (known: {known}): shares of the spec peak are left "
                  "out; the ceilings measured on the spot still give a roofline", stacklevel=2)
    return None
