"""Mismatch: per-token |log p_trainer - log p_rollout| per step, against what the precision explains.

The heatmap shows each step's histogram (share of tokens per log-spaced bin) with the
normal levels of bf16 (1e-3) and fp8 (1e-2) rollouts and the MoE routing-flip line (1);
the run's own level, from ``meta.json``'s ``precision``, is drawn solid.
"""

from __future__ import annotations

from collections.abc import Sequence

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from rlscope.analyzers.mismatch import expected_level
from rlscope.dashboards import figures
from rlscope.dashboards.live import LiveRun
from rlscope.dashboards.pages import _common as common

__all__ = ["layout"]


def layout(**_: object) -> html.Div:
    return html.Div(
        [
            html.Div(id="mismatch-notices"),
            common.graph("mismatch-heatmap"),
            common.graph("mismatch-quantiles"),
            dcc.Store(id="mismatch-seen"),
        ]
    )


dash.register_page(__name__, path="/mismatch", name="Mismatch", order=3, title="rlscope · Mismatch", layout=layout)


def _render(runs: Sequence[LiveRun]) -> tuple:
    levels = {r.label: expected_level(r.meta) for r in runs}
    heatmap = figures.placeholder("no run selected")
    if runs:
        first = runs[0]
        precision, model_type, level = levels[first.label]
        title = f"Log-prob mismatch per token: {first.label} ({precision}, {model_type})"
        heatmap = figures.mismatch_heatmap(first.logprob, level, title)
    level = levels[runs[0].label][2] if len(runs) == 1 else None
    quantiles = figures.mismatch_quantiles({r.label: r.logprob for r in runs}, level)
    return common.notices(runs), heatmap, quantiles


@dash.callback(
    Output("mismatch-notices", "children"),
    Output("mismatch-heatmap", "figure"),
    Output("mismatch-quantiles", "figure"),
    Output("mismatch-seen", "data"),
    Input("app-runs", "value"),
    common.REFRESH,
    State("mismatch-seen", "data"),
)
def _update(values: object, _tick: int | None, seen: list | None) -> tuple:
    runs = common.select(values)
    key = common.stamp(runs)
    if key == seen:
        raise PreventUpdate
    out = common.render_safely(lambda: _render(runs), ([], *common.failed(2)))
    return (*out, key)
