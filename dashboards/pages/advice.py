"""Advice: the topology what-if, the split it recommends, and how the balanced split drifted.

The what-if is fitted to the recent window (colocated, separated, one-step overlap and
async streaming at their best splits); the drift chart is each step's best split, so a
split sized for the start of the run can be checked against where answers have grown to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from rlscope.advice.finding import fmt_seconds
from rlscope.analyzers.topology import TopologyResult
from rlscope.dashboards import figures
from rlscope.dashboards.live import LiveRun
from rlscope.dashboards.pages import _common as common

__all__ = ["layout"]


_ADVICE_IDS = {"split-imbalanced", "split-drift", "async-recommended", "separated-sync", "async-idle-imbalanced"}


def layout(**_: object) -> html.Div:
    return html.Div(
        [
            html.Div(id="advice-notices"),
            html.H3("Topology what-if (recent steps)"),
            html.Div(id="advice-table"),
            html.Div(id="advice-recommendation"),
            html.Div([common.graph("advice-curve"), common.graph("advice-drift")], className="rls-grid"),
            dcc.Store(id="advice-seen"),
        ]
    )


dash.register_page(__name__, path="/advice", name="Advice", order=6, title="rlscope · Advice", layout=layout)


def _split(n_rollout: float, n_train: float) -> str:
    return "time-shared" if math.isnan(n_rollout) else f"{int(n_rollout)}:{int(n_train)}"


def _rows(label: str, t: TopologyResult) -> list[tuple]:
    rows = []
    for topology, r in t.what_if.iterrows():
        mark = (
            (" (current: colocate async, taking turns)" if t.shared else " (current)") if topology == t.current else ""
        )
        rows.append(
            (
                label,
                f"{str(topology).replace('_', ' ')}{mark}",
                _split(r["n_rollout"], r["n_train"]),
                fmt_seconds(r["step_s"]),
                f"{r['speedup']:.2f}x",
            )
        )
    return rows


def _recommendation(label: str, t: TopologyResult) -> str:
    best, n_r, n_t, step_s = t.best()  # a tie goes to the run as it is
    now = t.step_now_s
    where = "" if best == "colocated" else f" at {_split(n_r, n_t)}"
    current = "colocate async" if t.shared else t.current.replace("_", " ")
    if best == t.current and (t.n_rollout is None or t.n_rollout == n_r):
        return f"{label}: the current {current}{where} is the fastest option the model sees ({fmt_seconds(step_s)} s per step)."
    if best == t.current:  # the same topology, another split
        current += f" at {t.n_rollout}:{t.n_train}"
    if math.isnan(now):  # a pooled topology whose split meta.json does not give
        return (
            f"{label}: {best.replace('_', ' ')}{where} predicts {fmt_seconds(step_s)} s per step; the current "
            f"{current} is not modelled without its split."
        )
    return (
        f"{label}: {best.replace('_', ' ')}{where} predicts {fmt_seconds(step_s)} s per step against {fmt_seconds(now)} s "
        f"for the current {current} ({now / step_s:.2f}x); the measured recent step is {fmt_seconds(t.step_measured_s)} s."
    )


def _render(runs: Sequence[LiveRun]) -> tuple:
    rows, notes, advice = [], [], []
    why = "the first run selected has no what-if (see the notes below)" if runs else "no run selected"
    curve = figures.placeholder(why, "Predicted step time by split")
    for i, run in enumerate(runs):
        d = run.analysis()
        if d is not None:  # a run without a model keeps the advice it has (verl's idle ratios, say)
            advice += [f for f in d.findings if f.id in _ADVICE_IDS]
        if d is None or d.topology.model is None:
            why = (d.topology.missing if d is not None else None) or "no what-if yet: the run has no steps"
            notes.append(html.Div(f"{run.label}: {why}.", className="rls-muted"))
            continue
        rows += _rows(run.label, d.topology)
        notes.append(html.P(_recommendation(run.label, d.topology)))
        if i == 0:
            curve = figures.split_curve(d.topology.splits, d.topology.n_rollout)
            if len(runs) > 1:
                curve.update_layout(title_text=f"Predicted step time by split: {figures.text(run.label)}")
    table = (
        common.table(["run", "topology", "best rollout:train", "predicted step s", "vs current"], rows) if rows else []
    )
    drift = figures.split_drift(
        {r.label: r.splits() for r in runs},
        {r.label: r.facts.rollout_gpus if r.facts.is_pooled else None for r in runs},
    )
    return common.notices(runs), table, [*notes, common.findings_list(advice)], curve, drift


@dash.callback(
    Output("advice-notices", "children"),
    Output("advice-table", "children"),
    Output("advice-recommendation", "children"),
    Output("advice-curve", "figure"),
    Output("advice-drift", "figure"),
    Output("advice-seen", "data"),
    Input("app-runs", "value"),
    common.REFRESH,
    State("advice-seen", "data"),
)
def _update(values: object, _tick: int | None, seen: list | None) -> tuple:
    runs = common.select(values)
    key = common.stamp(runs)
    if key == seen:
        raise PreventUpdate
    out = common.render_safely(lambda: _render(runs), ([], [], [], *common.failed(2)))
    return (*out, key)
