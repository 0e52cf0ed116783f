"""Sphinx configuration of the iris-workbench documentation site (``bash scripts/docs.sh`` builds it).

The lessons are rendered by myst-nb with their outputs. Before the build, :mod:`stage_lessons` stages each
``notebooks/NN_*.ipynb`` into ``docs/lessons/`` and fills jupyter-cache with its executed outputs: the copy the
lesson test left in ``.cache/executed/`` when its code cells match, else a run of its own (on the CPU) for each
lesson whose code the cache does not hold yet. myst-nb then takes every lesson's outputs from the cache.
A view's output shows its static twin here (see ``workbench.widgets.static``): the widget's own output
has no script to draw it, on purpose, so the pages open offline.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS))
os.environ.setdefault("IRIS_BACKEND", "cpu")  # the lessons (and autodoc's imports) run on the CPU backend

import layers_picture  # noqa: E402  (docs/layers_picture.py: the architecture page's picture, from the contracts)
import stage_lessons  # noqa: E402  (docs/stage_lessons.py, next to this file)

project = "iris-workbench"
author = "the iris-workbench authors"
copyright = "the iris-workbench authors"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
exclude_patterns = ["_build"]
html_theme = "sphinx_book_theme"
html_title = "iris-workbench"
html_theme_options = {"show_toc_level": 2, "use_download_button": False}
html_static_path = ["_static"]
html_css_files = ["iris.css"]  # the views' static twins scroll sideways when wider than the page

# MyST: fenced directives, $math$, and headings given anchors for cross-links within a page.
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# Notebooks: outputs from jupyter-cache (filled by stage_lessons); a lesson whose code is unchanged is not run again.
nb_execution_mode = "cache"
nb_execution_cache_path = str(stage_lessons.CACHE)
nb_execution_in_temp = True  # (only if a lesson were missed: it would then run in a temporary folder)
nb_execution_timeout = 300  # seconds per cell
nb_execution_raise_on_error = True  # a failing lesson fails the build
nb_execution_show_tb = True
# No widget script from a CDN: a view's widget output draws nothing and its static twin is the picture.
nb_ipywidgets_js: dict = {}
nb_merge_streams = True

# API reference from the docstrings (numpydoc style, read by napoleon).
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": False}
autodoc_typehints = "description"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

stage_lessons.stage()
layers_picture.draw()


def triton_function(obj):
    """The Python function under a ``@triton.jit`` function or device-context method (compiled, or run by the
    interpreter on the CPU), else None."""
    from triton.runtime.jit import KernelInterface

    from iris.interpret.aggregate import InterpretedMethod

    if isinstance(obj, KernelInterface):
        return obj.fn
    return triton_function(obj.function) or obj.function if isinstance(obj, InterpretedMethod) else None


def kernel_signature(app, what, name, obj, options, signature, return_annotation):
    """A ``@triton.jit`` function's (or method's) own parameters, not the launcher's ``(*args, **kwargs)``."""
    fn = triton_function(obj)
    if fn is None:
        return None
    signature = inspect.signature(fn)
    if what == "method":  # as Sphinx shows any method: without self
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return str(signature), None


def kernel_docstring(app, what, name, obj, options, lines):
    """A ``@triton.jit`` function's own docstring (its object carries none); before napoleon reads it."""
    fn = triton_function(obj)
    if fn is not None and not lines and fn.__doc__:
        lines[:] = inspect.cleandoc(fn.__doc__).splitlines() + [""]


def setup(app):
    app.connect("autodoc-process-signature", kernel_signature)
    app.connect("autodoc-process-docstring", kernel_docstring, priority=100)  # napoleon's runs at 500
