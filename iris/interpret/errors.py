"""The error raised for Triton/Gluon features the CPU interpreter does not emulate."""


class UnsupportedOnInterpreter(Exception):
    """A kernel used a feature that the Triton CPU interpreter cannot run.

    Raised instead of returning a silently wrong result: shared memory
    descriptors, TMA and mbarrier operations, warp specialization and the other
    NVIDIA/AMD-specific Gluon operations only exist on a GPU.

    Examples
    --------
    >>> raise UnsupportedOnInterpreter("gl.warp_specialize")  # doctest: +SKIP
    Traceback (most recent call last):
    UnsupportedOnInterpreter: gl.warp_specialize is not emulated by the Triton CPU interpreter ...
    """

    def __init__(self, feature: str, reason: str = ""):
        self.feature = feature
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"{feature} is not emulated by the Triton CPU interpreter{why}. "
            "Run this kernel on a GPU, or write this part with plain gl.load/gl.store "
            "on global memory so that it also runs on the CPU."
        )
