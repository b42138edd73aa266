"""Rollout: when trajectories finish, how much the slowest 10% cost, response lengths, engine load.

The finish-time CDF and engine load are for one step: the step typed in, else each run's own
latest (named beside the run when they differ); a step older than the live window is read
from disk only when asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import dash
import numpy as np
import pandas as pd
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from rlscope.analyzers import longtail
from rlscope.dashboards import figures
from rlscope.dashboards.live import LiveRun
from rlscope.dashboards.pages import _common as common

__all__ = ["layout"]


def layout(**_: object) -> html.Div:
    return html.Div(
        [
            html.Div(id="rollout-notices"),
            html.Label(
                [
                    "Step for the finish-time CDF and engine load: ",
                    dcc.Input(
                        id="rollout-step",
                        type="number",
                        min=0,
                        step=1,
                        debounce=True,
                        placeholder="latest",
                        style={"width": "140px"},
                    ),
                ],
                className="rls-control",
            ),
            html.Div([common.graph("rollout-cdf"), common.graph("rollout-tail")], className="rls-grid"),
            html.Div([common.graph("rollout-lengths"), common.graph("rollout-engines")], className="rls-grid"),
            dcc.Store(id="rollout-seen"),
        ]
    )


dash.register_page(__name__, path="/rollout", name="Rollout", order=1, title="rlscope · Rollout", layout=layout)


def _steps(value: object, runs: Sequence[LiveRun]) -> list[int | None]:
    """Per run, the step asked for if it is a whole number, else that run's own latest step."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return [int(value)] * len(runs)
    return [r.last_step for r in runs]


def _tail_shares(tails: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Each step's tail share, and apart the steps whose estimate is the length cap's 0: diagnose
    judges the tail's trend without them."""
    if "tail_share" not in tails:
        return pd.Series(dtype=float), pd.Series(dtype=float)
    capped = longtail.at_length_cap(tails)
    return tails["tail_share"].where(~capped), tails["tail_share"].where(capped)


def _tail_bound(tails: pd.DataFrame) -> pd.Series:
    """The bound on each step's tail share where its estimate from response lengths is unknown."""
    if "tail_share_max" not in tails or "tail_share" not in tails:
        return pd.Series(dtype=float)
    return tails["tail_share_max"].where(tails["tail_share"].isna())


def _render(runs: Sequence[LiveRun], steps: Sequence[int | None]) -> tuple:
    finish, engines = {}, {}
    shown = {s for s in steps if s is not None}
    one = next(iter(shown)) if len(shown) == 1 else None  # the title's step when every run shows the same
    for run, step in zip(runs, steps, strict=True):
        if step is None:  # no data, but its place is kept so that each run keeps its colour
            finish[run.label], engines[run.label] = np.empty(0), pd.DataFrame()
            continue
        label = run.label if one is not None else f"{run.label} (step {step})"
        traj = run.trajectories(step)
        done = traj[~traj["aborted"].eq(True)] if "aborted" in traj else traj
        # a clock's times (time.time()) are no seconds since the rollout began: none measured, as the notices say
        measured = step not in run.clock_steps
        finish[label] = done["finish_time"].dropna().to_numpy(dtype=float) if measured else np.empty(0)
        loads = run.engines  # one snapshot: a refresh may replace the attribute meanwhile
        engines[label] = loads[loads.index == step] if not loads.empty else loads
    tails = [(run, run.tails) for run in runs]  # one snapshot each: a refresh may replace the attribute
    return (
        common.notices(runs),
        figures.finish_cdf(finish, one),
        figures.tail_shares(
            {r.label: _tail_shares(t)[0] for r, t in tails},
            {r.label: _tail_bound(t) for r, t in tails},
            {r.label: _tail_shares(t)[1] for r, t in tails},
        ),
        figures.response_lengths({r.label: r.lengths for r in runs}),
        figures.engine_load(engines, one),
    )


@dash.callback(
    Output("rollout-notices", "children"),
    Output("rollout-cdf", "figure"),
    Output("rollout-tail", "figure"),
    Output("rollout-lengths", "figure"),
    Output("rollout-engines", "figure"),
    Output("rollout-seen", "data"),
    Input("app-runs", "value"),
    common.REFRESH,
    Input("rollout-step", "value"),
    State("rollout-seen", "data"),
)
def _update(values: object, _tick: int | None, step_value: object, seen: list | None) -> tuple:
    runs = common.select(values)
    steps = _steps(step_value, runs)
    key = common.stamp(runs, steps)
    if key == seen:
        raise PreventUpdate
    out = common.render_safely(lambda: _render(runs, steps), ([], *common.failed(4)))
    return (*out, key)
