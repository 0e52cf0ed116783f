"""Draw the layers of iris and the workbench as an SVG, from the contracts in pyproject.toml and the packages' own
docstrings, so that the picture on the architecture page cannot drift from the code (``docs/conf.py`` draws it
before every build).

Examples
--------
>>> layers = contract_layers("iris")
>>> layers[0], layers[-1]
('upstream', 'base')
>>> svg = picture()                                     # doctest: +SKIP
"""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PICTURE = Path(__file__).resolve().parent / "_static" / "layers.svg"

WIDTH, ROW, GAP, LEFT, MIDDLE = 980, 30, 6, 20, 300
COLOURS = {"iris": "#e8f0fb", "workbench": "#eaf6ea", "edge": "#5b6b7f", "text": "#1d2733", "note": "#4a5a6a"}


def contract_layers(container: str) -> list[str]:
    """The layers pyproject.toml's import-linter contract gives ``container``, top to bottom."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    for contract in config["contracts"]:
        if contract["type"] == "layers" and contract.get("containers") == [container]:
            return contract["layers"]
    raise LookupError(f"pyproject.toml has no layers contract for {container}")


def summary(module_path: Path) -> str:
    """The first line of a module's (or package's) docstring, its reST roles and literals as plain text."""
    docstring = ast.get_docstring(ast.parse(module_path.read_text())) or ""
    line = docstring.splitlines()[0].rstrip(".") if docstring else ""
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", line).replace("``", "")


def module_file(package: str, name: str) -> Path:
    folder = ROOT / package / name
    return folder / "__init__.py" if folder.is_dir() else ROOT / package / f"{name}.py"


def box(x: float, y: float, width: float, label: str, note: str, fill: str) -> str:
    note = note if len(note) <= 104 else note[:101] + "..."
    return (f'<rect x="{x}" y="{y}" width="{width}" height="{ROW}" rx="5" fill="{fill}" stroke="{COLOURS["edge"]}"/>'
            f'<text x="{x + 10}" y="{y + 19}" font-weight="bold" fill="{COLOURS["text"]}">{html.escape(label)}</text>'
            f'<text x="{x + 185}" y="{y + 19}" fill="{COLOURS["note"]}">{html.escape(note)}</text>')


def picture() -> str:
    """The SVG: notebooks, the workbench's layers, iris's layers, torch and Triton, each with its one-line summary."""
    rows = [("notebooks/", "the lessons and their solutions; benchmarks/ and tests/ beside them", "#f4f4f4")]
    for layer in contract_layers("workbench"):
        names = [name.strip() for name in layer.replace("|", ":").split(":")]
        if len(names) == 1:
            rows.append((f"workbench.{names[0]}", summary(module_file("workbench", names[0])), COLOURS["workbench"]))
        else:
            rows.append((f"workbench: {len(names)} beside", ", ".join(names), COLOURS["workbench"]))
    rows.append(("iris (__init__)", "the public face: import iris; re-exports, installs upstream's paths", "#dfe7f3"))
    for layer in contract_layers("iris"):
        rows.append((f"iris.{layer}", summary(module_file("iris", layer)), COLOURS["iris"]))
    rows.append(("torch, triton", "torch.distributed (rendezvous, gloo/NCCL), Triton and Gluon, cuda-bindings",
                 "#f4f4f4"))
    height = len(rows) * (ROW + GAP) + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<text x="{LEFT}" y="18" fill="{COLOURS["text"]}">Imports point down: a layer imports only those '
             'below it (pyproject.toml\'s contracts, checked by the test command).</text>']
    y = 30
    for label, note, fill in rows:
        parts.append(box(LEFT + 30, y, WIDTH - LEFT - 60, label, note, fill))
        y += ROW + GAP
    parts.append(f'<line x1="{LEFT + 12}" y1="36" x2="{LEFT + 12}" y2="{y - 12}" stroke="{COLOURS["edge"]}" '
                 'stroke-width="2" marker-end="url(#down)"/>')
    parts.insert(1, f'<defs><marker id="down" markerWidth="10" markerHeight="10" refX="5" refY="5" orient="auto">'
                    f'<path d="M0,0 L10,5 L0,10 z" fill="{COLOURS["edge"]}"/></marker></defs>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def draw() -> Path:
    """Write :data:`PICTURE` (ignored by git: it is made from the contracts on every build)."""
    PICTURE.write_text(picture())
    return PICTURE


if __name__ == "__main__":
    print(draw())
