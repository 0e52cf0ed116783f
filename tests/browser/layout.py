"""How a view is laid out in a real browser, measured in the page: what the site test (the static twins on the
documentation site) and the JupyterLab test (the live widgets) both check of every view.

:func:`layout_problems` says, for one view's element, what a reader would see wrong:

- **cut off**: an element of the view reaches past the edge of the column it is in (the site's article, a
  JupyterLab output), or a box of the view hides part of what it holds; a table too wide for the column may
  scroll in a box of its own (:func:`iris.base.tables.html_table`), and a label may end in an ellipsis (the
  heap bars' names), nothing else may;
- **title twice**: the view's first line (its title) said again further down;
- **misaligned**: a value not under its header (aligned otherwise, or its text's edge off the header's), or
  run into its neighbour (less than :data:`MIN_GAP` pixels between two cells' texts);
- **wrapped**: a short table cell (at most :data:`SHORT` characters) broken over two lines.

:func:`untitled_picture_problem` checks that a rank panel's picture draws no title of its own (the panel says
it).

Examples
--------
>>> problems = layout_problems(page.locator(".iris-static > div").first, "article")   # doctest: +SKIP
>>> assert not problems, problems                                                     # doctest: +SKIP
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

MIN_GAP = 8  # pixels between the texts of two cells of a row
SHORT = 24  # characters: a cell this short stays on one line
TOLERANCE = 2  # pixels: how far a value's edge may be from its header's

_MEASURE = """
(root, [columnSelector, minGap, short, tolerance]) => {
  const problems = [];
  const view = root.className || root.tagName;
  const column = root.closest(columnSelector);
  if (!column) return [`${view}: not inside ${columnSelector}`];
  const edge = column.getBoundingClientRect();
  const clips = (e) => getComputedStyle(e).overflowX !== 'visible';
  const tableBox = (e) => e.children.length === 1 && e.firstElementChild.tagName === 'TABLE';
  const textOf = (e) => (e.textContent || '').trim();
  const label = (e) => `${e.tagName.toLowerCase()}${[...e.classList].map((c) => '.' + c).join('')} ` +
                       `"${textOf(e).slice(0, 40)}"`;

  // cut off
  const box = root.getBoundingClientRect();
  if (box.left < edge.left - 1 || box.right > edge.right + 1)
    problems.push(`${view}: cut off: spans ${box.left.toFixed(0)}-${box.right.toFixed(0)} px, the column ` +
                  `${edge.left.toFixed(0)}-${edge.right.toFixed(0)}`);
  for (const e of [root, ...root.querySelectorAll('*')]) {
    const r = e.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    let inScrollBox = false;
    for (let a = e.parentElement; a && a !== root.parentElement; a = a.parentElement)
      if (clips(a)) { inScrollBox = true; break; }
    if (!inScrollBox && r.right > edge.right + 1)
      problems.push(`${view}: cut off: ${label(e)} ends at ${r.right.toFixed(0)} px, past the column's ` +
                    `edge at ${edge.right.toFixed(0)}`);
    const shortened = getComputedStyle(e).textOverflow === 'ellipsis';  // a label cut short on purpose
    if (e instanceof HTMLElement && clips(e) && e.scrollWidth > e.clientWidth + 1 && !tableBox(e) && !shortened)
      problems.push(`${view}: cut off: ${label(e)} hides ${e.scrollWidth - e.clientWidth} px of what it holds`);
  }

  // title twice
  const lines = root.innerText.split('\\n').map((l) => l.trim()).filter((l) => l);
  if (lines.length && lines.filter((l) => l === lines[0]).length > 1)
    problems.push(`${view}: title twice: "${lines[0]}"`);

  // misaligned, wrapped
  const textBox = (cell) => {
    if (!textOf(cell)) return null;
    const range = document.createRange();
    range.selectNodeContents(cell);
    const rects = [...range.getClientRects()].filter((r) => r.width > 0);
    if (!rects.length) return null;
    const tops = new Set(rects.map((r) => Math.round(r.top / 4)));
    return {left: Math.min(...rects.map((r) => r.left)), right: Math.max(...rects.map((r) => r.right)),
            lines: tops.size};
  };
  const side = (cell) => ({start: 'left', end: 'right', '-webkit-left': 'left', '-webkit-right': 'right'}[
    getComputedStyle(cell).textAlign] || getComputedStyle(cell).textAlign);
  for (const table of root.querySelectorAll('table')) {
    if (!table.getClientRects().length) continue;
    const name = table.caption ? `table "${textOf(table.caption)}"` : `table.${table.className}`;
    const [head, ...body] = [...table.rows];
    for (const row of [head, ...body])
      for (const cell of row.cells) {
        const text = textBox(cell);
        if (text && text.lines > 1 && textOf(cell).length <= short)
          problems.push(`${view}: wrapped: ${name}: ${label(cell)} is on ${text.lines} lines`);
      }
    for (const row of body) {
      const cells = [...row.cells];
      for (let i = 1; i < cells.length; i++) {
        const a = textBox(cells[i - 1]), b = textBox(cells[i]);
        if (a && b && a.lines === 1 && b.lines === 1 && b.left - a.right < minGap)
          problems.push(`${view}: misaligned: ${name}: ${label(cells[i])} runs into ${label(cells[i - 1])} ` +
                        `(${(b.left - a.right).toFixed(0)} px apart)`);
      }
      if (cells.length !== head.cells.length) continue;  // a cell spanning columns: no header of its own
      cells.forEach((cell, i) => {
        const header = head.cells[i], value = textBox(cell), over = textBox(header);
        if (!value || !over) return;
        const where = `${name}: ${label(cell)} under ${label(header)}`;
        if (side(cell) !== side(header)) {
          problems.push(`${view}: misaligned: ${where}: the value ${side(cell)}, the header ${side(header)}`);
          return;
        }
        const off = side(cell) === 'right' ? value.right - over.right : side(cell) === 'center'
          ? (value.left + value.right - over.left - over.right) / 2 : value.left - over.left;
        if (Math.abs(off) > tolerance)
          problems.push(`${view}: misaligned: ${where}: ${off.toFixed(0)} px off the header's ${side(cell)} edge`);
      });
    }
  }
  return problems;
}
"""


def layout_problems(view, column_selector: str) -> list[str]:
    """What is wrong with the layout of ``view`` (a Playwright locator of one view's element) inside the
    closest ancestor matching ``column_selector``: cut off, title twice, misaligned or wrapped cells (see the
    module's docstring); empty when nothing is."""
    view.scroll_into_view_if_needed()
    return view.evaluate(_MEASURE, [column_selector, MIN_GAP, SHORT, TOLERANCE])


def untitled_picture_problem(image) -> str | None:
    """A problem when the picture of ``image`` (a locator of a rank panel's ``img``) draws a title of its own
    above its axes (the panel's title would be said twice): anything drawn above the axes' top edge, between its
    ends (a tick label beside the top of an axis may stand a little above it)."""
    image.scroll_into_view_if_needed()
    pixels = np.asarray(Image.open(io.BytesIO(image.screenshot())).convert("L"))
    dark = pixels[:, : pixels.shape[1] * 3 // 4] < 100  # left of the colour bar, whose top label may stand higher
    framed = np.flatnonzero(dark.mean(axis=1) > 0.5)  # the axes' top edge, first
    if not framed.size:
        return "a rank picture without axes"
    edge = np.flatnonzero(dark[framed[0]])
    above = pixels[: framed[0] - 1, edge[0] + 2: edge[-1] - 1]
    if above.size and above.min() < 200:
        return f"a rank picture draws a title of its own (something above its axes, in its top {framed[0]} rows)"
    return None
