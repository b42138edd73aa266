"""What every page shares: this app's live runs, the run selection, and the page chrome.

Page callbacks are global (``dash.callback``), so they find the runs through the app that
serves the request. The selection arrives from the browser;
``select`` accepts only indices into the fixed list of run directories and refuses anything
else with ``PreventUpdate`` (an empty 204 answer), so no request can make the dashboard open
another path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, dcc, html
from dash.exceptions import PreventUpdate

from rlscope.advice.finding import Finding, Severity
from rlscope.dashboards.figures import placeholder
from rlscope.dashboards.live import LiveRun, LiveRuns, UnknownRun

__all__ = [
    "REFRESH",
    "RUNS_KEY",
    "failed",
    "findings_list",
    "graph",
    "live_runs",
    "notices",
    "render_safely",
    "select",
    "stamp",
    "table",
]

log = logging.getLogger("rlscope")

RUNS_KEY = "rlscope.live_runs"
"""Key of the app's ``LiveRuns`` in ``app.server.config``."""

REFRESH = Input("app-refresh", "data")
"""The refresh tick as the pages hear it. A callback with it among its inputs is a render the refresh
drives: the app passes a tick on only while none of those is in flight (``rlscope.dashboards.app``)."""

_SEVERITY_COLORS = {Severity.CRITICAL: "#B71C1C", Severity.WARN: "#E65100", Severity.INFO: "#1565C0"}
_CELL = {"padding": "4px 10px", "borderBottom": "1px solid #ddd", "textAlign": "left"}


def live_runs() -> LiveRuns:
    """The runs of the app serving the current request."""
    return dash.get_app().server.config[RUNS_KEY]


def select(values: object) -> list[LiveRun]:
    """The selected runs, refreshed; a value that is not one of their indices refuses the request."""
    try:
        runs = live_runs().resolve(values)
    except UnknownRun:
        log.warning("dashboard: refused a request for run %r", values)
        raise PreventUpdate from None
    for run in runs:
        run.refresh()
    return runs


def stamp(runs: Sequence[LiveRun], *controls: object) -> list:
    """What a page's output depends on: each run's data version and the page's controls."""
    return [[r.index, r.version] for r in runs] + list(controls)


def render_safely(render: Callable[[], tuple], fallback: tuple) -> tuple:
    """``render()``, or ``fallback`` if it fails: a live page shows a placeholder, never an error page."""
    try:
        return render()
    except Exception:
        log.exception("dashboard: a page failed to render")
        return fallback


def failed(n_figures: int, n_other: int = 0) -> tuple:
    """Fallback outputs: placeholder figures, then a message for each other output."""
    figure = placeholder("this chart could not be drawn (see the dashboard's log)")
    return (*([figure] * n_figures), *(["could not render (see the dashboard's log)"] * n_other))


def graph(component_id: str, figure: go.Figure | None = None) -> dcc.Graph:
    return dcc.Graph(
        id=component_id,
        figure=figure or placeholder("loading"),
        config={"displaylogo": False, "responsive": True},
    )


def notices(runs: Sequence[LiveRun]) -> list[html.Div]:
    """One line per run that has nothing (or only part) to show yet, and one per warning ``rlscope
    diagnose`` reads the run with (ignored meta.json values, what its import left out, timers logged
    as inf or NaN, segments that could not be read), as text."""
    out = []
    if not runs:
        out.append(html.Div("No run selected: pick one above.", className="rls-notice"))
    for run in runs:
        if run.problem:
            out.append(html.Div(f"{run.label}: {run.problem}", className="rls-notice"))
        elif run.meta_missing:
            out.append(
                html.Div(
                    f"{run.label}: no meta.json yet, so GPU count, model size and topology are unknown "
                    "(MFU and the what-if need them)",
                    className="rls-notice",
                )
            )
        out += [html.Div(f"{run.label}: {warning}", className="rls-notice") for warning in run.warnings]
    return out


def findings_list(findings: Sequence[Finding]) -> html.Ul | html.Div:
    """Findings, most severe first, as plain text (ids, titles and advice are never markup)."""
    if not findings:
        return html.Div("No findings.", className="rls-muted")
    items = []
    for f in findings:
        items.append(
            html.Li(
                [
                    html.Span(
                        f.severity.value.upper(),
                        style={"color": "white", "background": _SEVERITY_COLORS[f.severity]},
                        className="rls-badge",
                    ),
                    html.Code(f.id, style={"marginRight": "6px"}),
                    html.Span(f.title, style={"fontWeight": 600}),
                    html.Div(f.recommendation, className="rls-muted"),
                ],
                style={"marginBottom": "8px"},
            )
        )
    return html.Ul(items, style={"listStyle": "none", "paddingLeft": 0})


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> html.Table:
    """A plain HTML table of text cells."""
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, style=_CELL) for h in header])),
            html.Tbody([html.Tr([html.Td(str(c), style=_CELL) for c in row]) for row in rows]),
        ],
        style={"borderCollapse": "collapse", "margin": "8px 0 16px"},
    )
