"""Reports and timelines as single HTML files that work offline. The only module that writes.

Pages are rendered by Jinja2 with autoescaping on, so every trace string in the HTML is text.
plotly.js is embedded once per page; each figure's JSON sits in its own
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` written as ``\\u003c``
etc., so no string in it can end the block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import jinja2
import plotly.graph_objects as go
import plotly.io as pio
from markupsafe import Markup
from plotly.offline import get_plotlyjs

from tracekit.atomic import write_text
from tracekit.report.figures import TRACE_META
from tracekit.report.sections import FigureSpec, Report, TimelinePage
from tracekit.report.style import BAR_WIDTH, MIN_BUSY_HEIGHT, encodable, short_kernel_name

_SCRIPT_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                "\u2029": "\\u2029"}  # fmt: skip


@dataclass(frozen=True)
class Embedded:
    """A figure as the template places it."""

    key: str
    data: Markup  # the figure's JSON, safe inside a script element
    lod: Markup | None  # the timeline payload's JSON
    link: str | None
    height: int


def script_safe(text: str) -> Markup:
    """JSON text that cannot end or comment out the script element holding it."""
    for char, escaped in _SCRIPT_SAFE.items():
        text = text.replace(char, escaped)
    return Markup(text)  # safe: every '<' and '&' is escaped above


def embed(spec: FigureSpec) -> Embedded:
    """The figure's JSON (and its timeline payload). With a payload, the page script redraws
    the timeline's first view with hover text, so the figure's own hover text is left out."""
    figure = spec.figure
    lod = None
    if spec.lod is not None:
        lod = script_safe(json.dumps(spec.lod, allow_nan=False, separators=(",", ":")))
        figure = go.Figure(figure)
        for trace in figure.data:
            if str(trace.meta or "").startswith(TRACE_META):
                trace.hovertext = None
    data = pio.to_json(figure, validate=False, pretty=False)
    height = int(spec.figure.layout.height or 450)
    return Embedded(spec.key, script_safe(data), lod, spec.link, height)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tracekit.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short_name"] = short_kernel_name
    return env


@lru_cache(maxsize=1)
def _plotly_js() -> Markup:
    js = get_plotlyjs()
    if "</script" in js.lower():  # pragma: no cover - would break the page
        raise RuntimeError("plotly.js contains '</script'; cannot inline it")
    return Markup(js)  # plotly's own bundle, inlined once


def _version() -> str:
    try:
        return version("tracekit")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "dev"


def _render(template: str, page: Report | TimelinePage, **extra: Any) -> str:
    figures = {spec.key: embed(spec) for spec in page.figures()}
    return (
        _environment()
        .get_template(template)
        .render(
            page=page,
            figures=figures,
            plotly_js=_plotly_js(),
            tracekit_version=_version(),
            bar_width=BAR_WIDTH,
            min_busy_height=MIN_BUSY_HEIGHT,
            **extra,
        )
    )


def render_report(report: Report) -> str:
    """The report page's HTML."""
    return encodable(_render("report.html.j2", report))


def render_timeline(page: TimelinePage) -> str:
    """The timeline page's HTML."""
    return encodable(_render("timeline.html.j2", page))


def write_report(path: Path, report: Report) -> int:
    """Write the report to ``path``; return its size in bytes."""
    return write_text(path, render_report(report))


def write_timeline(path: Path, page: TimelinePage) -> int:
    """Write the timeline page to ``path``; return its size in bytes."""
    return write_text(path, render_timeline(page))
