"""Roofline arithmetic: what a kernel of a given arithmetic intensity can reach under a compute peak and a bandwidth.

``attainable = min(peak, intensity x bandwidth)``: a kernel doing ``intensity`` flops per byte it moves is held
by the bandwidth below the ridge point (``peak / bandwidth`` flops per byte) and by the compute peak above it.
TFLOP/s and GB/s throughout, so ``intensity x GB/s / 1000`` is TFLOP/s.

Examples
--------
>>> roof = Roof("H200 spec", peak_tflops=989.5, bandwidth_gbs=4800.0)
>>> round(roof.ridge, 1)
206.1
>>> roof.attainable(10.0), roof.attainable(1000.0)
(48.0, 989.5)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Roof:
    """A compute peak (TFLOP/s) and a bandwidth (GB/s) under one label (``"spec"``, ``"measured"``).

    Examples
    --------
    >>> Roof("measured", 700.0, 4000.0).attainable(100.0)
    400.0
    """

    label: str
    peak_tflops: float
    bandwidth_gbs: float

    @property
    def ridge(self) -> float:
        """Flops per byte where the bandwidth roof meets the compute roof."""
        return self.peak_tflops * 1e3 / self.bandwidth_gbs

    def attainable(self, intensity: float) -> float:
        """TFLOP/s a kernel of ``intensity`` flops per byte can reach under this roof."""
        return min(self.peak_tflops, intensity * self.bandwidth_gbs / 1e3)


def intensity(flops: float | None, nbytes: float | None) -> float | None:
    """Arithmetic intensity, flops per byte of memory traffic; None unless both are given and bytes > 0.

    Examples
    --------
    >>> intensity(2 * 8192 ** 3, 3 * 2 * 8192 ** 2)
    2730.6666666666665
    >>> intensity(None, 100) is None
    True
    """
    if flops is None or not nbytes:
        return None
    return flops / nbytes


def share_of_roof(achieved_tflops: float, roof: Roof, at_intensity: float) -> float:
    """The fraction of what ``roof`` allows at ``at_intensity`` that ``achieved_tflops`` reaches (1.0: on the roof).

    Examples
    --------
    >>> share_of_roof(24.0, Roof("spec", 989.5, 4800.0), 10.0)
    0.5
    """
    return achieved_tflops / roof.attainable(at_intensity)
