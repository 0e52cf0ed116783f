"""NVIDIA detection for the topology map: a rank's GPU (PCI bus id, UUID, fabric domain) and the links between
its host's GPUs (NVLink, NVSwitch, PCIe), from the CUDA driver (cuda-bindings) and NVML.

NVML is read through ``ctypes`` on ``libnvidia-ml.so.1``, which the NVIDIA driver installs on every NVIDIA host,
so neither pynvml nor cuda-bindings' NVML module is needed. Whatever is missing degrades to an UNKNOWN link or
an empty field, with a note in the map's summary that says what and why; nothing here raises for a missing
library.

Examples
--------
>>> record = local_gpu_record(rank=0, host="node-a")      # doctest: +SKIP
>>> record.gpu.pci_bus_id, record.link_types              # doctest: +SKIP
('0000:19:00.0', [[-1, 1], [1, -1]])
"""

from __future__ import annotations

import ctypes
import re

from ..topology.levels import IntraNodeLinkType
from ..topology.map import FabricInfo, GPUInfo, RankRecord

NVML_LIBRARY = "libnvidia-ml.so.1"
_NVML_SUCCESS = 0
_NVML_P2P_CAPS_INDEX_NVLINK = 2
_NVML_P2P_STATUS_OK = 0
_NVML_NVLINK_MAX_LINKS = 18
_NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
_NVML_GPU_FABRIC_STATE_COMPLETED = 3
# nvmlDeviceGetTopologyCommonAncestor's answer -> our PCIe link (INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM)
_PCIE_BY_ANCESTOR = {
    0: IntraNodeLinkType.PCIE_SWITCH, 10: IntraNodeLinkType.PCIE_SWITCH, 20: IntraNodeLinkType.PCIE_SWITCH,
    30: IntraNodeLinkType.PCIE_HOST_BRIDGE, 40: IntraNodeLinkType.PCIE_NUMA, 50: IntraNodeLinkType.PCIE_SYSTEM,
}


class _GpuFabricInfo(ctypes.Structure):
    """NVML's nvmlGpuFabricInfo_t (the unversioned struct of nvmlDeviceGetGpuFabricInfo)."""

    _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte)]


def normalize_pci_bus_id(bus_id: str) -> str:
    """``"00000000:19:00.0"`` or ``"0000:19:00.0"`` -> ``"0000:19:00.0"`` (lower case, 4-digit domain).

    Examples
    --------
    >>> normalize_pci_bus_id("00000000:1A:00.0")
    '0000:1a:00.0'
    """
    match = re.search(r"([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f])", bus_id.strip().lower())
    if not match:
        return bus_id.strip().lower()
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus}:{device}.{function}"


class Nvml:
    """An open NVML session (``nvmlInit_v2`` ... ``nvmlShutdown``), found by :meth:`open`."""

    def __init__(self, lib):
        self._lib = lib
        self._lib.nvmlErrorString.restype = ctypes.c_char_p

    @classmethod
    def open(cls, notes: list[str]) -> Nvml | None:
        """NVML, or None with a note saying why it is unavailable."""
        try:
            lib = ctypes.CDLL(NVML_LIBRARY)
        except OSError as err:
            notes.append(f"NVML unavailable ({NVML_LIBRARY}: {err}): links between GPUs UNKNOWN, fabric unknown")
            return None
        rc = lib.nvmlInit_v2()
        if rc != _NVML_SUCCESS:
            lib.nvmlErrorString.restype = ctypes.c_char_p
            notes.append(f"NVML did not initialise ({lib.nvmlErrorString(rc).decode()}): links between GPUs "
                         "UNKNOWN, fabric unknown")
            return None
        return cls(lib)

    def close(self) -> None:
        self._lib.nvmlShutdown()

    def error(self, rc: int) -> str:
        return self._lib.nvmlErrorString(rc).decode()

    def handle(self, pci_bus_id: str):
        """The NVML device of a PCI bus id (immune to CUDA_VISIBLE_DEVICES), or None."""
        handle = ctypes.c_void_p()
        rc = self._lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle))
        return handle if rc == _NVML_SUCCESS else None

    def uuid(self, handle) -> str:
        buffer = ctypes.create_string_buffer(96)
        rc = self._lib.nvmlDeviceGetUUID(handle, buffer, ctypes.c_uint(len(buffer)))
        return buffer.value.decode() if rc == _NVML_SUCCESS else ""

    def fabric(self, handle, device_name: str, notes: list[str]) -> FabricInfo:
        """The GPU's fabric domain; empty, with a note, where the GPU has none or registration is not done."""
        if not hasattr(self._lib, "nvmlDeviceGetGpuFabricInfo"):
            notes.append("fabric: this NVIDIA driver's NVML has no nvmlDeviceGetGpuFabricInfo (driver too old)")
            return FabricInfo()
        info = _GpuFabricInfo()
        rc = self._lib.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        if rc != _NVML_SUCCESS:
            notes.append(f"fabric: not supported on {device_name} (NVML: {self.error(rc)}), so no fabric domain")
            return FabricInfo()
        if info.state != _NVML_GPU_FABRIC_STATE_COMPLETED or info.status != _NVML_SUCCESS:
            notes.append(f"fabric: {device_name} has not completed fabric registration (state {info.state}, "
                         f"status {self.error(info.status)}), so no fabric domain")
            return FabricInfo()
        cluster = bytes(info.clusterUuid).hex()
        if not int(cluster, 16):  # seen on 2 x H100 SXM (one NVSwitch board): registered, in no multi-host cluster
            notes.append(f"fabric: {device_name} is registered with the fabric manager but in no multi-host NVLink "
                         f"cluster (NVML cluster UUID zero, clique {info.cliqueId}), so no fabric domain")
            return FabricInfo()
        return FabricInfo(cluster_uuid=cluster, clique_id=int(info.cliqueId))

    def link(self, handle_a, handle_b) -> IntraNodeLinkType:
        """NVLINK / NVSWITCH when NVML reports NVLink peer-to-peer between the two, else the PCIe level of their
        nearest common ancestor; UNKNOWN when NVML cannot tell."""
        status = ctypes.c_int()
        rc = self._lib.nvmlDeviceGetP2PStatus(handle_a, handle_b, _NVML_P2P_CAPS_INDEX_NVLINK, ctypes.byref(status))
        if rc == _NVML_SUCCESS and status.value == _NVML_P2P_STATUS_OK:
            return IntraNodeLinkType.NVSWITCH if self._links_to_switch(handle_a) else IntraNodeLinkType.NVLINK
        ancestor = ctypes.c_int()
        rc = self._lib.nvmlDeviceGetTopologyCommonAncestor(handle_a, handle_b, ctypes.byref(ancestor))
        if rc != _NVML_SUCCESS:
            return IntraNodeLinkType.UNKNOWN
        return _PCIE_BY_ANCESTOR.get(ancestor.value, IntraNodeLinkType.UNKNOWN)

    def _links_to_switch(self, handle) -> bool:
        """Whether any active NVLink of the GPU ends at an NVSwitch."""
        for link in range(_NVML_NVLINK_MAX_LINKS):
            active, kind = ctypes.c_uint(), ctypes.c_int()
            if self._lib.nvmlDeviceGetNvLinkState(handle, link, ctypes.byref(active)) != _NVML_SUCCESS:
                continue
            if not active.value:
                continue
            rc = self._lib.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link, ctypes.byref(kind))
            if rc == _NVML_SUCCESS and kind.value == _NVML_NVLINK_DEVICE_TYPE_SWITCH:
                return True
        return False


def _cuda_driver(notes: list[str]):
    """cuda-bindings' driver API, initialised, or None with a note."""
    try:
        from cuda.bindings import driver
    except ImportError:
        notes.append("cuda-bindings missing (pip install cuda-bindings): PCI bus ids, peer access and links UNKNOWN")
        return None
    (err,) = driver.cuInit(0)
    if int(err) != 0:
        notes.append(f"the CUDA driver did not initialise ({err!r}): PCI bus ids, peer access and links UNKNOWN")
        return None
    return driver


def _pci_bus_ids(driver, count: int) -> list[str]:
    """Each visible device's PCI bus id, by CUDA device index ("" where the driver cannot tell)."""
    ids = []
    for index in range(count):
        err, bus_id = driver.cuDeviceGetPCIBusId(32, index)
        ids.append(normalize_pci_bus_id(bus_id.decode().rstrip("\x00")) if int(err) == 0 else "")
    return ids


def _peer_access(driver, count: int) -> list[list[bool]]:
    """``[i][j]``: whether device i can access device j's memory directly (cuDeviceCanAccessPeer)."""
    matrix = []
    for a in range(count):
        row = []
        for b in range(count):
            if a == b:
                row.append(True)
                continue
            err, can = driver.cuDeviceCanAccessPeer(a, b)
            row.append(int(err) == 0 and bool(can))
        matrix.append(row)
    return matrix


def _numa_node(pci_bus_id: str) -> int:
    """The NUMA node of a PCI device, from sysfs; -1 when unknown."""
    try:
        with open(f"/sys/bus/pci/devices/{pci_bus_id}/numa_node") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return -1


def local_gpu_record(rank: int, host: str) -> RankRecord:
    """This rank's report on the CUDA backend: its GPU (``iris.base.backend.gpu_for_rank``) and the links and peer
    access between all of its host's visible GPUs."""
    import torch

    from ...base.backend import gpu_for_rank

    notes: list[str] = []
    gpu_id = gpu_for_rank(rank)
    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(gpu_id)
    driver = _cuda_driver(notes)
    pci_ids = _pci_bus_ids(driver, count) if driver else [""] * count
    p2p = _peer_access(driver, count) if driver else None
    uuid, fabric, links = "", FabricInfo(), None
    nvml = Nvml.open(notes)
    if nvml is not None:
        try:
            handles = [nvml.handle(p) if p else None for p in pci_ids]
            if handles[gpu_id] is not None:
                uuid = nvml.uuid(handles[gpu_id])
                fabric = nvml.fabric(handles[gpu_id], props.name, notes)
            if all(h is not None for h in handles):
                links = [[IntraNodeLinkType.SELF.value if a == b else nvml.link(handles[a], handles[b]).value
                          for b in range(count)] for a in range(count)]
            else:
                notes.append("NVML found no device for some PCI bus ids: links between GPUs UNKNOWN")
        finally:
            nvml.close()
    gpu = GPUInfo(global_rank=rank, local_rank=-1, hostname=host, gpu_id=gpu_id, pci_bus_id=pci_ids[gpu_id],
                  device_name=props.name, total_memory_mb=props.total_memory >> 20,
                  numa_node=_numa_node(pci_ids[gpu_id]) if pci_ids[gpu_id] else -1, vendor="nvidia", uuid=uuid,
                  fabric_info=fabric)
    return RankRecord(gpu, link_types=links, p2p_access=p2p, notes=notes)
