"""Overview: headline numbers, step time by phase, the MFU waterfall and the current findings.

Findings and the waterfall come from the analyzers run on the recent window (recomputed
only when new rows arrive); the whole run is analysed only when the button asks for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from rlscope.advice.finding import Severity, fmt_seconds
from rlscope.analyzers import Diagnosis
from rlscope.analyzers._data import recent
from rlscope.dashboards import figures
from rlscope.dashboards.live import LiveRun
from rlscope.dashboards.pages import _common as common

__all__ = ["layout"]


def layout(**_: object) -> html.Div:
    return html.Div(
        [
            html.Div(id="overview-notices"),
            html.Div(id="overview-headline"),
            html.Div(
                [common.graph("overview-phases"), common.graph("overview-waterfall")],
                className="rls-grid",
            ),
            html.H3("Findings"),
            html.Div(id="overview-findings"),
            html.Button("Analyse the whole run", id="overview-full", n_clicks=0, className="rls-button"),
            html.Div(id="overview-full-findings"),
            dcc.Store(id="overview-seen"),
        ]
    )


dash.register_page(__name__, path="/", name="Overview", order=0, title="rlscope · Overview", layout=layout)


def _number(value: float, fmt: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def _card(name: str, value: str) -> html.Div:
    return html.Div(
        [html.Div(name, className="rls-card-name"), html.Div(value, className="rls-card-value")], className="rls-card"
    )


def _last_steps(n: int) -> str:
    return "last step" if n == 1 else f"last {n} steps"


def _last(per_step: pd.DataFrame) -> str:
    """The steps a headline number describes: the last quarter of those in the analysed window."""
    return f" ({_last_steps(len(recent(per_step)))})" if len(per_step) else ""


def _tail_share(d: Diagnosis | None) -> str:
    """The recent tail share as diagnose's headline qualifies it: one estimated from response lengths
    says so, and where the estimate is unknown the bound that stands is shown as a bound, not a value."""
    if d is None:
        return "-"
    tail = d.longtail
    if not tail.estimated:
        return _number(tail.tail_share, ".0%")
    if math.isfinite(tail.tail_share):
        return f"{tail.tail_share:.0%} (estimated)"
    return f"<= {tail.tail_share_max:.0%}" if math.isfinite(tail.tail_share_max) else "-"


def _tail_unknown(unknown: int, window: int, points_max: float) -> str:
    """The waterfall title's word on the ``unknown`` steps of its ``window`` whose generation is one
    "decode + long tail" bar: the most of that bar the tail can hold, if known."""
    if not unknown:
        return ""
    most = (
        f"at most {points_max:.1f} of decode + long tail's points" if math.isfinite(points_max) else "no bound either"
    )
    where = f" in {unknown} of them" if unknown < window else ""
    return f"; long tail unknown{where}, {most}"


def _headline(run: LiveRun, d: Diagnosis | None) -> html.Div:
    facts = run.facts
    # the analyzers assume colocated when meta.json says nothing; the card does not
    kind = "colocate async" if facts.shares_gpus else facts.kind.replace("_", " ")
    topology = kind if run.meta.get("topology") else "?"
    if facts.is_pooled:
        topology += f" {facts.rollout_gpus}:{facts.train_gpus}"
    step_s = gen = mfu = math.nan
    counts = "-"
    timed = tailed = rated = found_in = ""
    bounded = d is not None and bool(d.mfu.uncounted)  # a timed critic of unknown size counts no FLOPs
    if d is not None:
        timed, tailed, rated = _last(d.anatomy.seconds), _last(d.longtail.per_step), _last(d.mfu.per_step)
        found_in = f" ({_last_steps(min(run.n_steps, run.window))})"
        if not d.anatomy.seconds.empty:
            now = recent(d.anatomy.seconds).mean()
            step_s, gen = float(now["step"]), float(now["gen"] / now["step"]) if now["step"] > 0 else math.nan
            if "gen" not in d.anatomy.logged_recent:  # not timed: its time, if any, is in other, not 0%
                gen = math.nan
        mfu = d.mfu.mfu
        found = d.findings
        counts = " · ".join(f"{sum(f.severity is s for f in found)} {s.value}" for s in reversed(Severity))
    cards = [
        _card("run", run.label),
        _card("topology", topology),
        _card("GPUs", str(facts.n_gpus or "?")),
        _card("steps", f"{run.n_trained} (latest step {run.last_step})" if run.n_steps else "none yet"),
        _card(f"step time{timed}", f"{fmt_seconds(step_s)} s" if math.isfinite(step_s) else "n/a"),
        _card(f"generation / step{timed}", _number(gen, ".0%")),
        _card(f"tail share{tailed}", _tail_share(d)),
        _card(f"MFU{rated}", (">= " if bounded and math.isfinite(mfu) else "") + _number(mfu, ".1%")),
        _card(f"findings{found_in}", counts),
    ]
    return html.Div(cards, className="rls-cards")


def _render(runs: Sequence[LiveRun], full: bool) -> tuple:
    analyses = {r.label: r.analysis() for r in runs}
    headline = [_headline(r, analyses[r.label]) for r in runs]
    if len(runs) == 1:
        run, d = runs[0], analyses[runs[0].label]
        if run.phases.empty and run.unread("steps"):
            phases = figures.placeholder(
                "the step metrics could not be read (see the notices above)", "Step time by phase"
            )
        else:
            phases = figures.step_phases(run.phases, overlapped=run.facts.overlapped)
        if d is None:
            waterfall = figures.placeholder("no steps yet", "MFU waterfall")
        else:
            steps = len(d.anatomy.seconds)
            waterfall = figures.mfu_waterfall(
                d.mfu.waterfall,
                d.mfu.mfu,
                f"MFU waterfall (last quarter of the last {steps} steps)"
                + ("; a lower bound: the critic is not counted" if d.mfu.uncounted else "")
                + _tail_unknown(len(d.mfu.tail_unknown_steps), len(recent(d.mfu.per_step)), d.mfu.tail_points_max),
                tail_estimated=d.mfu.tail_estimated,
            )
    else:
        # every selected run is passed, with or without data, so that each keeps its colour
        phases = figures.step_time_compare({r.label: r.phases.get("step", pd.Series(dtype=float)) for r in runs})
        waterfall = figures.mfu_compare(
            {
                label: (d.mfu.waterfall, d.mfu.mfu, d.mfu.tail_estimated)
                if d is not None
                else (pd.Series(dtype=float), math.nan, False)
                for label, d in analyses.items()
            },
            lower_bounds={label for label, d in analyses.items() if d is not None and d.mfu.uncounted},
        )
    found = []
    for run in runs:
        d = analyses[run.label]
        title = f"{run.label}: {_last_steps(len(d.anatomy.seconds) if d else 0)}"
        found += [html.H4(title), common.findings_list(d.findings if d else [])]
    whole = []
    for run in runs:
        result = run.full_analysis(recompute=full)
        if result is not None:
            step, d = result
            whole += [html.H4(f"{run.label}: whole run as of step {step}"), common.findings_list(d.findings)]
    return common.notices(runs), headline, phases, waterfall, found, whole


@dash.callback(
    Output("overview-notices", "children"),
    Output("overview-headline", "children"),
    Output("overview-phases", "figure"),
    Output("overview-waterfall", "figure"),
    Output("overview-findings", "children"),
    Output("overview-full-findings", "children"),
    Output("overview-seen", "data"),
    Input("app-runs", "value"),
    common.REFRESH,
    Input("overview-full", "n_clicks"),
    State("overview-seen", "data"),
)
def _update(values: object, _tick: int | None, clicks: int | None, seen: list | None) -> tuple:
    runs = common.select(values)
    key = common.stamp(runs, clicks)
    if key == seen:
        raise PreventUpdate
    full = dash.ctx.triggered_id == "overview-full"
    out = common.render_safely(lambda: _render(runs, full), ([], [], *common.failed(2), [], []))
    return (*out, key)
