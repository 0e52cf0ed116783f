"""How two ranks reach each other: the interconnect tier (upstream Iris's :class:`InterconnectLevel`) and the link
between their devices (:class:`IntraNodeLinkType`), with upstream's names and values plus two of ours.

Examples
--------
>>> InterconnectLevel.INTRA_NODE < InterconnectLevel.INTER_NODE_RDMA
True
>>> str(IntraNodeLinkType.NVLINK)
'NVLINK'
"""

from __future__ import annotations

from enum import IntEnum


class InterconnectLevel(IntEnum):
    """The tier between two ranks, nearest first: one host, one fabric domain across hosts (NVLink through
    NVSwitch trays, as in GB200 NVL72), or only the network between them."""

    INTRA_NODE = 0
    INTRA_RACK_FABRIC = 1
    INTER_NODE_RDMA = 2

    def __str__(self) -> str:
        return self.name


class IntraNodeLinkType(IntEnum):
    """The link between two ranks' devices; the lower, the closer (upstream's values).

    ``SHARED_MEMORY`` and ``NETWORK`` are ours: CPU-backend ranks of one host share memory (/dev/shm), and
    ranks on different hosts with no fabric domain in common reach each other only over the network.
    ``UNKNOWN`` means detection could not tell (a library missing: the map's notes say which).
    """

    SELF = -1  # the same device (or, on the CPU backend, the same rank)
    NVLINK = 0  # direct NVLink between the two GPUs
    NVSWITCH = 1  # NVLink through NVSwitch (all GPUs to all)
    PCIE_SWITCH = 2  # one PCIe switch (nvidia-smi topo: PIX/PXB)
    PCIE_HOST_BRIDGE = 3  # one PCIe host bridge (PHB)
    PCIE_NUMA = 4  # host bridges of one NUMA node (NODE)
    PCIE_SYSTEM = 5  # across sockets (SYS)
    SHARED_MEMORY = 6  # CPU backend: ranks of one host map the same /dev/shm files
    NETWORK = 7  # different hosts, no fabric domain in common
    UNKNOWN = 99

    def __str__(self) -> str:
        return self.name
