"""HTML tables whose headers stand over their values, wherever they are shown: a notebook's output, a widget in
JupyterLab, the documentation site.

Every cell carries its own alignment, padding and wrapping as inline styles. Left to a page's style sheet, a
header and its values part ways: browsers centre ``<th>`` and push ``<td>`` left, JupyterLab's widgets add no
padding (values run into their row labels), the site's theme has rules of its own. A short cell never wraps
(``published[0, 0]``, ``heap of``, ``2 · 9.6 ms`` stay whole); columns of prose may. A table wider than the
column it is in scrolls inside it instead of spilling over.

Examples
--------
>>> print(html_table(["rank", "bytes"], [["rank 0", "4 KiB"]]))     # doctest: +ELLIPSIS
<div style='display:grid;...'><table ...><thead><tr><th style='...;text-align:left;...'>rank</th>...
"""

from __future__ import annotations

# The box around a table: it scrolls the table when the column is narrower, and it never widens what holds it.
# A grid whose one column may shrink to nothing (minmax(0, 1fr)) counts as no wider than nothing where the page
# sizes boxes to their content (JupyterLab's widgets, the views' static form), yet as wide as the table where
# there is room; the table keeps its own width at the start of it.
BOX = "display:grid;grid-template-columns:minmax(0,1fr);justify-items:start;overflow-x:auto;max-width:100%"
TABLE = "font-size:12px;border-collapse:collapse"
CELL = "padding:1px 8px;vertical-align:top"
CAPTION = "caption-side:top;text-align:left;font-weight:bold;padding:2px 8px"

# A cell: its HTML, or (its HTML, more CSS for it: a shade, a colour).
Cell = str | tuple[str, str]


def html_table(head: list[Cell], rows: list[list[Cell]], *, align: str = "", wrap: tuple[int, ...] = (),
               caption: str = "", css_class: str = "", row_labels: bool = True) -> str:
    """An HTML table (in a ``div`` that scrolls it when it is wider than its column) with every cell aligned
    as its column is.

    Parameters
    ----------
    head : list
        The header cells: HTML (escaped by the caller), or ``(html, css)`` to style one.
    rows : list of list
        The body, cells as in ``head``. A row shorter than ``head`` has its last cell span the columns left.
    align : str
        ``"l"`` or ``"r"`` per column, headers included; default: the first column (row labels) left, the
        others (values) right.
    wrap : tuple of int
        The columns whose cells may wrap (prose); every other cell stays on one line.
    caption : str
        A title above the table (HTML).
    css_class : str
        The table's class.
    row_labels : bool
        The first cell of each row is its label (``<th>``), not a value.

    Examples
    --------
    >>> table = html_table(["kernel", "element"], [["k", "x[0, 0]"]], align="ll", css_class="iris-races")
    >>> "<table class='iris-races'" in table and "white-space:nowrap'>x[0, 0]</td>" in table
    True
    """
    align = align or ("l" + "r" * (len(head) - 1) if head else "")
    if len(align) != len(head):
        raise ValueError(f"align: one letter per column ({len(head)}), got {align!r}")

    def cell(tag: str, value: Cell, column: int, span: int = 1) -> str:
        content, css = value if isinstance(value, tuple) else (value, "")
        style = f"{CELL};text-align:{'left' if align[column] == 'l' else 'right'}"
        style += "" if column in wrap else ";white-space:nowrap"
        style += f";{css}" if css else ""
        colspan = f" colspan='{span}'" if span > 1 else ""
        return f"<{tag}{colspan} style='{style}'>{content}</{tag}>"

    def row_html(row: list[Cell]) -> str:
        cells = []
        for column, value in enumerate(row):
            span = len(head) - column if column == len(row) - 1 else 1
            cells.append(cell("th" if column == 0 and row_labels else "td", value, column, span))
        return f"<tr>{''.join(cells)}</tr>"

    classes = f" class='{css_class}'" if css_class else ""
    title = f"<caption style='{CAPTION}'>{caption}</caption>" if caption else ""
    header = "".join(cell("th", value, column) for column, value in enumerate(head))
    body = "".join(row_html(row) for row in rows)
    return (f"<div style='{BOX}'><table{classes} style='{TABLE}'>{title}"
            f"<thead><tr>{header}</tr></thead><tbody>{body}</tbody></table></div>")
