"""Rewards: mean reward by data source, and zero share against error rate.

A zero is a legal reward; an error means the reward service did not score. Seen side by
side per source, a failing service (errors) and a hard source (zeros, no errors) look
different, and the error codes say which service to fix.
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
            html.Div(id="rewards-notices"),
            common.graph("rewards-by-source"),
            common.graph("rewards-zero-error"),
            html.H3("Reward errors by code"),
            html.Div(id="rewards-errors"),
            dcc.Store(id="rewards-seen"),
        ]
    )


dash.register_page(__name__, path="/rewards", name="Rewards", order=4, title="rlscope · Rewards", layout=layout)


def _errors(runs: Sequence[LiveRun]) -> html.Table | html.Div:
    """Error samples per (source, code) with the steps they span, over the whole run so far."""
    rows = []
    for run in runs:
        if run.reward_errors.empty:
            continue
        by = (
            run.reward_errors.reset_index()
            .groupby(["source", "code"])
            .agg(samples=("count", "sum"), first=("step", "min"), last=("step", "max"))
            .reset_index()
            .sort_values(["source", "samples"], ascending=[True, False])
        )
        rows += [(run.label, r.source, r.code, f"{r.samples:,}", r.first, r.last) for r in by.itertuples()]
    if not rows:
        return html.Div("No reward errors recorded.", className="rls-muted")
    return common.table(["run", "data source", "error code", "samples", "first step", "last step"], rows)


def _render(runs: Sequence[LiveRun]) -> tuple:
    steps = {r.label: r.reward_steps for r in runs}
    return common.notices(runs), figures.reward_by_source(steps), figures.zero_vs_error(steps), _errors(runs)


@dash.callback(
    Output("rewards-notices", "children"),
    Output("rewards-by-source", "figure"),
    Output("rewards-zero-error", "figure"),
    Output("rewards-errors", "children"),
    Output("rewards-seen", "data"),
    Input("app-runs", "value"),
    common.REFRESH,
    State("rewards-seen", "data"),
)
def _update(values: object, _tick: int | None, seen: list | None) -> tuple:
    runs = common.select(values)
    key = common.stamp(runs)
    if key == seen:
        raise PreventUpdate
    out = common.render_safely(lambda: _render(runs), ([], *common.failed(2, 1)))
    return (*out, key)
