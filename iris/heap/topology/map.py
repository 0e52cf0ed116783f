"""The topology map: for every pair of ranks, whether one maps the other's heap and how they are linked.

Built from one :class:`RankRecord` per rank (what :func:`iris.heap.discover.discover` gathers, or hand-made in tests).
Upstream Iris's classes and methods keep their names and meaning (:class:`FabricInfo`, :class:`GPUInfo`,
:class:`NodeInfo`, :class:`TopologyMap` with ``get_interconnect_level``, ``get_node_peers``, ...); ours answer
the questions the heap and the workbench ask: :meth:`TopologyMap.can_map`, :meth:`~TopologyMap.link`,
:meth:`~TopologyMap.domains`, :meth:`~TopologyMap.explain`.

Examples
--------
>>> records = [RankRecord(GPUInfo.for_cpu_rank(r, host)) for r, host in enumerate(["a", "a", "b"])]
>>> topo = TopologyMap.from_records(records)
>>> topo.domains(), topo.can_map(0, 1), topo.can_map(0, 2)
([[0, 1], [2]], True, False)
>>> str(topo.link(0, 1)), str(topo.get_interconnect_level(1, 2))
('SHARED_MEMORY', 'INTER_NODE_RDMA')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .levels import InterconnectLevel, IntraNodeLinkType

CPU_VENDOR = "cpu"  # GPUInfo.vendor of a CPU-backend rank: its "device" is its host's memory


@dataclass
class FabricInfo:
    """Where a GPU sits in a multi-host NVLink fabric: GPUs with one ``(cluster_uuid, clique_id)`` are in one
    fabric domain (NVML's ``clusterUuid`` in hex and ``cliqueId``). Empty when the GPU has no fabric.

    Examples
    --------
    >>> FabricInfo("00aa", 3).domain_key, FabricInfo().is_valid
    ('00aa:3', False)
    """

    cluster_uuid: str = ""
    clique_id: int = 0

    @property
    def is_valid(self) -> bool:
        """True when the GPU reported a fabric domain."""
        return bool(self.cluster_uuid)

    @property
    def domain_key(self) -> str:
        """``"cluster:clique"``, equal for GPUs of one fabric domain; ``""`` without a fabric."""
        return f"{self.cluster_uuid}:{self.clique_id}" if self.is_valid else ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> FabricInfo:
        return cls(cluster_uuid=d.get("cluster_uuid", ""), clique_id=d.get("clique_id", 0))


@dataclass
class GPUInfo:
    """One rank's device, as the rank itself saw it. On the CPU backend ``vendor`` is ``"cpu"`` and the GPU
    fields are empty (``gpu_id`` -1): the rank's memory is its host's.

    Examples
    --------
    >>> GPUInfo.for_cpu_rank(1, "host-b").hostname
    'host-b'
    """

    global_rank: int
    local_rank: int  # index among its host's ranks (set when the map is built)
    hostname: str
    gpu_id: int  # device index in the rank's process (-1 on the CPU backend)
    pci_bus_id: str  # "0000:41:00.0", "" when unknown
    device_name: str
    total_memory_mb: int
    numa_node: int  # -1 when unknown
    vendor: str  # "nvidia" or "cpu"
    uuid: str  # "GPU-...", "" when unknown
    fabric_info: FabricInfo = field(default_factory=FabricInfo)

    @classmethod
    def for_cpu_rank(cls, rank: int, hostname: str) -> GPUInfo:
        """The record of a CPU-backend rank on ``hostname``."""
        return cls(global_rank=rank, local_rank=-1, hostname=hostname, gpu_id=-1, pci_bus_id="",
                   device_name="CPU", total_memory_mb=0, numa_node=-1, vendor=CPU_VENDOR, uuid="")

    @property
    def device_key(self) -> str:
        """What identifies the physical device on its host: UUID, else PCI bus id, else the device index."""
        return self.uuid or self.pci_bus_id or str(self.gpu_id)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPUInfo:
        fields = {k: v for k, v in d.items() if k != "fabric_info"}
        return cls(**fields, fabric_info=FabricInfo.from_dict(d.get("fabric_info") or {}))


@dataclass
class RankRecord:
    """What one rank reports in discovery: its device, and what it measured about its host's devices.

    ``link_types[i][j]`` (:class:`IntraNodeLinkType` values) and ``p2p_access[i][j]`` are indexed by device
    index on the rank's host; None when not measured. ``notes`` say what could not be detected and why.
    """

    gpu: GPUInfo
    link_types: list[list[int]] | None = None
    p2p_access: list[list[bool]] | None = None
    has_infiniband: bool = False
    ib_devices: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RankRecord:
        return cls(**{**d, "gpu": GPUInfo.from_dict(d["gpu"])})


@dataclass
class NodeInfo:
    """One host: its ranks, its distinct devices, and the link and peer-access matrices of its devices."""

    hostname: str
    ranks: list[int] = field(default_factory=list)
    gpu_ids: list[int] = field(default_factory=list)  # per rank (ranks may share a GPU)
    unique_gpu_ids: list[int] = field(default_factory=list)
    unique_pci_ids: list[str] = field(default_factory=list)
    num_gpus: int = 0  # distinct physical GPUs, not ranks
    num_ranks: int = 0
    has_infiniband: bool = False
    ib_devices: list[str] = field(default_factory=list)
    link_types: list[list[int]] | None = None  # by device index
    p2p_access: list[list[bool]] | None = None  # by device index
    fabric_domain_key: str = ""
    fabric_domain_keys: list[str] = field(default_factory=list)

    def get_link_type(self, gpu_id_a: int, gpu_id_b: int) -> IntraNodeLinkType:
        """The link between two of this host's devices; UNKNOWN when not measured or out of the matrix."""
        if gpu_id_a == gpu_id_b:
            return IntraNodeLinkType.SELF
        if self.link_types is None or not (0 <= gpu_id_a < len(self.link_types)
                                           and 0 <= gpu_id_b < len(self.link_types[gpu_id_a])):
            return IntraNodeLinkType.UNKNOWN
        return IntraNodeLinkType(self.link_types[gpu_id_a][gpu_id_b])

    def can_p2p_access(self, gpu_id_a: int, gpu_id_b: int) -> bool:
        """Whether device a can access device b's memory directly (the CUDA driver's answer)."""
        if gpu_id_a == gpu_id_b:
            return True
        if self.p2p_access is None or not (0 <= gpu_id_a < len(self.p2p_access)
                                           and 0 <= gpu_id_b < len(self.p2p_access[gpu_id_a])):
            return False
        return bool(self.p2p_access[gpu_id_a][gpu_id_b])


def rank_runs(ranks) -> list[list[int]]:
    """The ranks sorted and cut into runs of consecutive ones: ``[5, 0, 1, 2]`` -> ``[[0, 1, 2], [5]]``.

    Examples
    --------
    >>> rank_runs([5, 0, 1, 2])
    [[0, 1, 2], [5]]
    """
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def rank_ranges(ranks) -> str:
    """``[0, 1, 2, 5]`` -> ``"ranks 0-2, 5"``; ``[3]`` -> ``"rank 3"``.

    Examples
    --------
    >>> rank_ranges([0, 1, 2, 5]), rank_ranges([3])
    ('ranks 0-2, 5', 'rank 3')
    """
    text = ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in rank_runs(ranks))
    return f"{'ranks' if len(ranks) > 1 else 'rank'} {text}"


_LINK_WORDS = {
    IntraNodeLinkType.SELF: "the same GPU",
    IntraNodeLinkType.NVLINK: "NVLink",
    IntraNodeLinkType.NVSWITCH: "NVLink through NVSwitch",
    IntraNodeLinkType.PCIE_SWITCH: "PCIe through one switch",
    IntraNodeLinkType.PCIE_HOST_BRIDGE: "PCIe through the host bridge",
    IntraNodeLinkType.PCIE_NUMA: "PCIe across host bridges of one NUMA node",
    IntraNodeLinkType.PCIE_SYSTEM: "PCIe across CPU sockets",
    IntraNodeLinkType.SHARED_MEMORY: "shared memory",
    IntraNodeLinkType.NETWORK: "the network only (torch.distributed)",
    IntraNodeLinkType.UNKNOWN: "a link that could not be detected",
}


@dataclass
class TopologyMap:
    """Every rank's device and host, and how each pair of ranks reaches each other.

    Attributes
    ----------
    world_size, num_nodes : int
    gpu_info : dict[int, GPUInfo]
        rank -> its device.
    nodes : dict[str, NodeInfo]
        host -> its ranks and devices.
    fabric_domains : dict[str, list[str]]
        fabric domain key -> its hosts.
    notes : list[str]
        What detection could not tell, and why (a library missing, fabric not supported...).
    """

    world_size: int
    num_nodes: int
    gpu_info: dict[int, GPUInfo]
    nodes: dict[str, NodeInfo]
    fabric_domains: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_records(cls, records: list[RankRecord]) -> TopologyMap:
        """The map of ``records[r]`` = rank r's report (what every rank has after the all-gather)."""
        for r, record in enumerate(records):
            if record.gpu.global_rank != r:
                raise ValueError(f"record {r} is rank {record.gpu.global_rank}'s: records must be in rank order, "
                                 "one per rank")
        gpu_info = {r: record.gpu for r, record in enumerate(records)}
        by_host: dict[str, list[int]] = {}
        for r, info in gpu_info.items():
            by_host.setdefault(info.hostname, []).append(r)
        nodes = {}
        for host, ranks in by_host.items():
            for local, r in enumerate(ranks):
                gpu_info[r].local_rank = local
            first = records[ranks[0]]  # every rank of a host measured the same devices
            infos = [gpu_info[r] for r in ranks]
            keys = sorted({i.fabric_info.domain_key for i in infos if i.fabric_info.domain_key})
            unique_devices = {i.device_key for i in infos}
            nodes[host] = NodeInfo(
                hostname=host, ranks=ranks, gpu_ids=[i.gpu_id for i in infos],
                unique_gpu_ids=sorted({i.gpu_id for i in infos}),
                unique_pci_ids=sorted({i.pci_bus_id for i in infos if i.pci_bus_id}),
                num_gpus=0 if infos[0].vendor == CPU_VENDOR else len(unique_devices), num_ranks=len(ranks),
                has_infiniband=first.has_infiniband, ib_devices=list(first.ib_devices),
                link_types=first.link_types, p2p_access=first.p2p_access,
                fabric_domain_key=keys[0] if keys else "", fabric_domain_keys=keys,
            )
        fabric_domains: dict[str, list[str]] = {}
        for host, node in nodes.items():
            for key in node.fabric_domain_keys:
                fabric_domains.setdefault(key, []).append(host)
        notes = list(dict.fromkeys(note for record in records for note in record.notes))
        return cls(len(records), len(nodes), gpu_info, nodes, fabric_domains, notes)

    # -- upstream's questions ---------------------------------------------------------------------------
    def get_interconnect_level(self, rank_a: int, rank_b: int) -> InterconnectLevel:
        """INTRA_NODE for one host, INTRA_RACK_FABRIC for one fabric domain across hosts, else
        INTER_NODE_RDMA (the network)."""
        a, b = self._info(rank_a), self._info(rank_b)
        if a.hostname == b.hostname:
            return InterconnectLevel.INTRA_NODE
        if a.fabric_info.domain_key and a.fabric_info.domain_key == b.fabric_info.domain_key:
            return InterconnectLevel.INTRA_RACK_FABRIC
        return InterconnectLevel.INTER_NODE_RDMA

    def get_node_peers(self, rank: int) -> set[int]:
        """The other ranks on ``rank``'s host."""
        return set(self.nodes[self._info(rank).hostname].ranks) - {rank}

    def get_fabric_domain_peers(self, rank: int) -> set[int]:
        """The other ranks in ``rank``'s fabric domain (empty without a fabric)."""
        key = self._info(rank).fabric_info.domain_key
        return set(self.get_ranks_for_fabric_domain(key)) - {rank} if key else set()

    def get_rdma_peers(self, rank: int) -> set[int]:
        """The ranks ``rank`` reaches only over the network."""
        return set(range(self.world_size)) - self.get_node_peers(rank) - self.get_fabric_domain_peers(rank) - {rank}

    def get_ranks_for_node(self, hostname: str) -> list[int]:
        """The ranks on ``hostname``, sorted ([] for a host not in the map)."""
        return sorted(self.nodes[hostname].ranks) if hostname in self.nodes else []

    def get_ranks_for_fabric_domain(self, domain_key: str) -> list[int]:
        """The ranks whose GPUs are in fabric domain ``domain_key``, sorted ([] for an unknown or empty key)."""
        if not domain_key:
            return []
        return sorted(r for r, info in self.gpu_info.items() if info.fabric_info.domain_key == domain_key)

    # -- ours ---------------------------------------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        """rank -> its host."""
        return [self.gpu_info[r].hostname for r in range(self.world_size)]

    def link(self, rank_a: int, rank_b: int) -> IntraNodeLinkType:
        """What links the two ranks' devices: SELF for one device (one rank, on the CPU backend), SHARED_MEMORY
        between CPU ranks of one host, NVLINK / NVSWITCH / PCIE_* / UNKNOWN between GPUs of one host; across
        hosts NVSWITCH within one fabric domain (its NVLink runs through NVSwitch trays), else NETWORK."""
        a, b = self._info(rank_a), self._info(rank_b)
        if a.hostname != b.hostname:
            if self.get_interconnect_level(rank_a, rank_b) == InterconnectLevel.INTRA_RACK_FABRIC:
                return IntraNodeLinkType.NVSWITCH
            return IntraNodeLinkType.NETWORK
        if a.vendor == CPU_VENDOR:
            return IntraNodeLinkType.SELF if rank_a == rank_b else IntraNodeLinkType.SHARED_MEMORY
        if a.device_key == b.device_key:
            return IntraNodeLinkType.SELF
        return self.nodes[a.hostname].get_link_type(a.gpu_id, b.gpu_id)

    def can_map(self, rank_a: int, rank_b: int) -> bool:
        """Whether rank a maps rank b's heap: today, when both are on one host (shared memory on the CPU
        backend, CUDA IPC on GPUs)."""
        return self._info(rank_a).hostname == self._info(rank_b).hostname

    def domains(self) -> list[list[int]]:
        """The groups of ranks that map each other's heaps, each sorted, ordered by first rank."""
        return sorted(sorted(node.ranks) for node in self.nodes.values())

    def explain(self, rank_a: int, rank_b: int) -> str:
        """One sentence naming both ranks, their hosts and what connects them.

        Examples
        --------
        >>> records = [RankRecord(GPUInfo.for_cpu_rank(r, h)) for r, h in enumerate(["a", "a", "b", "b"])]
        >>> TopologyMap.from_records(records).explain(0, 2).split(": ")[0]
        "rank 0 (a) cannot address rank 2's heap (b)"
        """
        a, b = self._info(rank_a), self._info(rank_b)
        if rank_a == rank_b:
            return f"rank {rank_a} ({a.hostname}) addresses its own heap."
        link = self.link(rank_a, rank_b)
        if self.can_map(rank_a, rank_b):
            how = _LINK_WORDS[link]
            if a.vendor != CPU_VENDOR and link != IntraNodeLinkType.SELF:
                how += f" (GPU {a.gpu_id} to GPU {b.gpu_id})"
            return f"rank {rank_a} maps rank {rank_b}'s heap: both are on {a.hostname}, linked by {how}."
        groups = " and ".join(
            f"{rank_ranges(self.nodes[h].ranks)} {'share' if self.nodes[h].num_ranks > 1 else 'is alone on'} {h}"
            for h in dict.fromkeys([a.hostname, b.hostname]))
        if link == IntraNodeLinkType.NVSWITCH:
            reach = (f"they share fabric domain {a.fabric_info.domain_key} (NVLink), but heaps are mapped only "
                     "within a host here, so they reach each other over torch.distributed")
        else:
            reach = "they reach each other only over the network (torch.distributed)"
        return f"rank {rank_a} ({a.hostname}) cannot address rank {rank_b}'s heap ({b.hostname}): {reach}; {groups}."

    def headline(self) -> str:
        """The summary in one line: ranks per host, what maps what, fabric, and what could not be detected."""
        hosts = ", ".join(f"{h}: {rank_ranges(n.ranks)}" for h, n in self.nodes.items())
        cpu = self.gpu_info[0].vendor == CPU_VENDOR
        parts = [f"{self.world_size} rank{'s' if self.world_size != 1 else ''} on {self.num_nodes} "
                 f"host{'s' if self.num_nodes != 1 else ''} ({hosts})"]
        if self.num_nodes > 1:
            parts.append("heaps mapped within each host; between hosts "
                         + ("fabric domain or network" if self.fabric_domains else "network only (torch.distributed)"))
        if not cpu:
            links = sorted({self.link(a, b) for a in range(self.world_size) for b in range(self.world_size)
                            if a != b and self.can_map(a, b)})
            if links:
                parts.append("within a host: " + ", ".join(str(link) for link in links))
            parts.append(f"fabric domains: {len(self.fabric_domains)}" if self.fabric_domains
                         else "no fabric domain")
        else:
            parts.append("CPU backend: ranks of a host share memory")
        return "; ".join(parts + self.notes)

    def summary(self) -> str:
        """Human-readable summary: the headline, then each host and its ranks' devices, then fabric domains."""
        lines = [f"Iris topology: {self.headline()}"]
        for host, node in self.nodes.items():
            net = f"InfiniBand: {', '.join(node.ib_devices)}" if node.has_infiniband else "InfiniBand: none"
            fabric = f", fabric {node.fabric_domain_key}" if node.fabric_domain_key else ""
            devices = "" if node.num_gpus == 0 else f"{node.num_gpus} GPU{'s' if node.num_gpus != 1 else ''}, "
            lines.append(f"  host {host}: {devices}{rank_ranges(node.ranks)}, {net}{fabric}")
            for r in node.ranks:
                info = self.gpu_info[r]
                if info.vendor != CPU_VENDOR:
                    lines.append(f"    rank {r}: GPU {info.gpu_id} {info.device_name} ({info.total_memory_mb} MB) "
                                 f"PCI {info.pci_bus_id or 'unknown'} {info.uuid or ''}".rstrip())
        if self.fabric_domains:
            lines.append("  Fabric Domains:")
        for key, hosts in sorted(self.fabric_domains.items()):
            lines.append(f"    {key}: hosts {', '.join(hosts)}, "
                         f"{rank_ranges(self.get_ranks_for_fabric_domain(key))}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def _info(self, rank: int) -> GPUInfo:
        if rank not in self.gpu_info:
            raise ValueError(f"rank {rank} is not in this topology of {self.world_size} ranks "
                             f"(ranks 0-{self.world_size - 1})")
        return self.gpu_info[rank]
