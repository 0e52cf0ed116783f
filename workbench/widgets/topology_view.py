"""TopologyView: who reaches whom, as a rank x rank matrix coloured by the link between the two ranks, ranks
grouped by host (the groups that map each other's heaps outlined), above the topology's summary.

The matrix is SVG built here, so the widget and the static form (:mod:`.static`) show the same picture; hover
a cell for :meth:`iris.heap.topology.TopologyMap.explain` of that pair. The view's ``text/plain`` is the headline.

Examples
--------
>>> view = TopologyView(wb.pull("ctx.topology", ranks=[0])[0])    # doctest: +SKIP
>>> print(view.summary())                                         # doctest: +SKIP
TopologyView: 4 ranks on 2 hosts (host-a: ranks 0-1, host-b: ranks 2-3); ...
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from iris.heap.topology import IntraNodeLinkType, TopologyMap
from iris.heap.topology.map import rank_runs

from .static import StaticForm

L = IntraNodeLinkType
# link -> (fill colour, the cell's short label): the nearest links greenest, PCIe blue to yellow, the network red.
STYLE = {
    L.SELF: ("#d9d9d9", "self"), L.NVLINK: ("#1a9850", "NV"), L.NVSWITCH: ("#66bd63", "NVS"),
    L.PCIE_SWITCH: ("#4575b4", "PIX"), L.PCIE_HOST_BRIDGE: ("#74add1", "PHB"), L.PCIE_NUMA: ("#abd9e9", "NODE"),
    L.PCIE_SYSTEM: ("#fee090", "SYS"), L.SHARED_MEMORY: ("#80cdc1", "SHM"), L.NETWORK: ("#f46d43", "NET"),
    L.UNKNOWN: ("#f7f7f7", "?"),
}
SIDE = 320  # pixels of the matrix, whatever the number of ranks
LEFT = 120  # room for the row labels ("rank 12 · host-a")
TOP = 24  # the column labels


class TopologyView(StaticForm, widgets.VBox):
    """A :class:`~iris.heap.topology.TopologyMap` as a rank x rank matrix, a legend and its summary.

    Parameters
    ----------
    topology : iris.heap.topology.TopologyMap

    Attributes
    ----------
    topology : iris.heap.topology.TopologyMap
    matrix : ipywidgets.HTML
        The matrix (SVG) and its legend.
    details : ipywidgets.HTML
        :meth:`~iris.heap.topology.TopologyMap.summary`, hosts and devices.
    """

    def __init__(self, topology: TopologyMap):
        self.topology = topology
        self.header = widgets.HTML(f"<b>topology</b>: {html.escape(topology.headline())}")
        self.matrix = widgets.HTML(matrix_svg(topology) + legend_html(topology))
        self.details = widgets.HTML(f"<pre style='font-size:11px'>{html.escape(topology.summary())}</pre>")
        super().__init__([self.header, self.matrix, self.details])
        self.add_class("iris-topology-view")

    def summary(self) -> str:
        """``TopologyView: `` and the topology's headline."""
        return f"TopologyView: {self.topology.headline()}"


def links_present(topology: TopologyMap) -> list[IntraNodeLinkType]:
    """The links between the map's ranks, nearest first."""
    n = topology.world_size
    return sorted({topology.link(a, b) for a in range(n) for b in range(n)})


def matrix_svg(topology: TopologyMap) -> str:
    """The rank x rank matrix as an SVG element: cell (a, b) coloured by ``topology.link(a, b)``, rows labelled
    with rank and host, each group of :meth:`~iris.heap.topology.TopologyMap.domains` outlined.

    Examples
    --------
    >>> from iris.heap.topology import GPUInfo, RankRecord
    >>> topo = TopologyMap.from_records([RankRecord(GPUInfo.for_cpu_rank(r, "h")) for r in range(2)])
    >>> matrix_svg(topo)[:4]
    '<svg'
    """
    n = topology.world_size
    cell = SIDE / n
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{LEFT + SIDE + 8}' height='{TOP + SIDE + 8}' "
             "font-size='10' font-family='sans-serif'>"]
    hosts = topology.hosts
    for a in range(n):
        y = TOP + a * cell
        if cell >= 11:
            parts.append(f"<text x='{LEFT - 4}' y='{y + cell / 2 + 3:.1f}' text-anchor='end'>rank {a} · "
                         f"{html.escape(hosts[a])}</text>")
            parts.append(f"<text x='{LEFT + (a + 0.5) * cell:.1f}' y='{TOP - 6}' text-anchor='middle'>{a}</text>")
        for b in range(n):
            colour, label = STYLE[topology.link(a, b)]
            parts.append(f"<rect x='{LEFT + b * cell:.1f}' y='{y:.1f}' width='{cell:.1f}' height='{cell:.1f}' "
                         f"fill='{colour}' stroke='#fff' stroke-width='1'>"
                         f"<title>{html.escape(topology.explain(a, b))}</title></rect>")
            if cell >= 30:
                parts.append(f"<text x='{LEFT + (b + 0.5) * cell:.1f}' y='{y + cell / 2 + 3:.1f}' "
                             f"text-anchor='middle'>{label}</text>")
    for group in topology.domains():  # ranks are grouped by host, not always contiguous: outline each run
        for run in rank_runs(group):
            parts.append(f"<rect x='{LEFT + run[0] * cell:.1f}' y='{TOP + run[0] * cell:.1f}' "
                         f"width='{len(run) * cell:.1f}' height='{len(run) * cell:.1f}' fill='none' "
                         "stroke='#333' stroke-width='2'/>")
    parts.append("</svg>")
    return "".join(parts)


def legend_html(topology: TopologyMap) -> str:
    """A swatch and a name per link present in the matrix, and what the outlines mean."""
    items = "".join(f"<span style='margin-right:10px'><span style='display:inline-block;width:10px;height:10px;"
                    f"background:{STYLE[link][0]};border:1px solid #999'></span> {STYLE[link][1]} = {link}</span>"
                    for link in links_present(topology))
    return (f"<div style='font-size:11px'>{items}<br>outlined: ranks that map each other's heaps (one host); "
            "hover a cell for how that pair reaches each other</div>")

