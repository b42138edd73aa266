"""Async: trainer and rollouter idle ratios, how stale consumed samples are, and staleness vs length.

Long answers take longer, so they are staler: dropping stale samples drops long answers
first. The length chart shows that link over the live window.
"""

from __future__ import annotations

from collections.abc import Sequence

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from rlscope.dashboards import figures
from rlscope.dashboards.live import LiveRun
from rlscope.dashboards.pages import _common as common

__all__ = ["layout"]


def layout(**_: object) -> html.Div:
    return html.Div(
        [
            html.Div(id="async-notices"),
            common.graph("async-idle"),
            html.Div([common.graph("async-staleness"), common.graph("async-length")], className="rls-grid"),
            dcc.Store(id="async-seen"),
        ]
    )


dash.register_page(__name__, path="/async", name="Async", order=2, title="rlscope · Async", layout=layout)


def _render(runs: Sequence[LiveRun]) -> tuple:
    return (
        common.notices(runs),
        figures.idle_ratios({r.label: r.idle for r in runs}),
        figures.staleness({r.label: r.lags for r in runs}, {r.label: r.verl_lags for r in runs}),
        figures.staleness_vs_length({r.label: r.lag_lengths() for r in runs}),
    )


@dash.callback(
    Output("async-notices", "children"),
    Output("async-idle", "figure"),
    Output("async-staleness", "figure"),
    Output("async-length", "figure"),
    Output("async-seen", "data"),
    Input("app-runs", "value"),
    common.REFRESH,
    State("async-seen", "data"),
)
def _update(values: object, _tick: int | None, seen: list | None) -> tuple:
    runs = common.select(values)
    key = common.stamp(runs)
    if key == seen:
        raise PreventUpdate
    out = common.render_safely(lambda: _render(runs), ([], *common.failed(3)))
    return (*out, key)
