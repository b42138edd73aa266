"""Plotly figures of a diagnosis for the HTML report, one function per picture.

Each takes analyzer results (pandas frames) and returns a Figure, or None when the run
lacks the evidence. Names that come from the run are HTML-escaped before they reach
plotly, which renders a subset of HTML in labels.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import pyarrow.compute as pc

from rlscope.analyzers import Diagnosis
from rlscope.analyzers._data import last_attempt_table
from rlscope.analyzers.mfu import cause_label, drawn_causes
from rlscope.report._format import tail_unknown_note
from rlscope.trace.reader import RunReader
from rlscope.trace.schema import LOGPROB_BIN_EDGES, LOGPROB_BINS_PER_DECADE

__all__ = ["all_figures"]

_LAYOUT = {"template": "plotly_white", "height": 380, "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}


def _safe(name: object) -> str:
    return html.escape(str(name))


def phase_stack(d: Diagnosis) -> go.Figure | None:
    seconds = d.anatomy.seconds
    if seconds.empty:
        return None
    fig = go.Figure()
    # generation beside the step (one-step overlap, async) is not part of it: the step's wait
    # for the next batch stands for it, and stacking both would count that time twice
    beside = ["gen"] if d.anatomy.overlapped else []
    for phase in seconds.columns.drop(["step", *beside], errors="ignore"):
        if seconds[phase].abs().sum() > 0:
            fig.add_bar(x=seconds.index, y=seconds[phase], name=_safe(phase))
    title = "Step time by phase" + (" (generation runs beside the step: not stacked)" if beside else "")
    fig.update_layout(barmode="stack", title=title, xaxis_title="step", yaxis_title="seconds", **_LAYOUT)
    return fig


def waterfall(d: Diagnosis) -> go.Figure | None:
    lost = d.mfu.waterfall
    if lost is None or len(lost) == 0 or not 0 <= d.mfu.mfu <= 1:  # NaN, or above 1: a fact is wrong
        return None
    lost = lost[drawn_causes(lost)]  # as every report draws it: decode_long_tail only where a tail is unknown
    labels = ["ideal", *[_safe(cause_label(c, d.mfu.tail_estimated)) for c in lost.index], "MFU"]
    values = [100.0, *(-lost.to_numpy(dtype=float)), 0.0]
    measures = ["absolute", *["relative"] * len(lost), "total"]
    fig = go.Figure(go.Waterfall(x=labels, y=values, measure=measures, connector={"line": {"color": "#999"}}))
    title = f"Whole-step MFU waterfall: {d.mfu.mfu:.1%}"
    if d.mfu.tail_unknown:
        title += f"<br><sub>{_safe(tail_unknown_note(d.mfu.tail_unknown_steps, d.mfu.tail_points_max))}</sub>"
    fig.update_layout(title=title, yaxis_title="% of peak FLOP/s", **_LAYOUT)
    return fig


def finish_cdf(reader: RunReader, d: Diagnosis) -> go.Figure | None:
    if d.longtail.estimated or d.longtail.per_step.empty:
        return None
    step = int(d.longtail.per_step.index.max())
    table = reader.read("trajectories", ["step", "attempt", "finish_time"], filter=pc.field("step") == step)
    table = last_attempt_table(table)  # a restart's redone step: its last attempt's rows
    t = np.sort(table.column("finish_time").to_numpy(zero_copy_only=False).astype(float))
    t = t[np.isfinite(t)]
    if t.size == 0:
        return None
    fig = go.Figure(go.Scatter(x=t, y=np.arange(1, t.size + 1) / t.size, mode="lines", name="finished"))
    row = d.longtail.per_step.loc[step]
    title = f"Trajectory finish times, step {step}"
    if not math.isnan(row["tail_share"]):  # one trajectory: no slowest 10% to mark
        fig.add_vline(x=row["t_thr_s"], line_dash="dash", annotation_text="90% finished")
        title += f": the slowest 10% take {row['tail_share']:.0%} of rollout"
    fig.update_layout(
        title=title,
        xaxis_title="seconds since rollout start",
        yaxis_title="share finished",
        **_LAYOUT,
    )
    return fig


def mismatch_heatmap(d: Diagnosis) -> go.Figure | None:
    m = d.mismatch
    if m is None or m.histogram.empty:
        return None
    hist = m.histogram
    totals = hist.sum(axis=1).replace(0, np.nan)
    share = hist.div(totals, axis=0)
    lows = LOGPROB_BIN_EDGES[:-1]
    labels = ["0"] + [f"{x:.0e}" for x in lows[1:]]
    fig = go.Figure(
        go.Heatmap(z=share.T.to_numpy(), x=hist.index, y=labels, colorscale="Viridis", colorbar_title="share")
    )
    level_bin = f"{m.level:.0e}"
    if level_bin in labels:
        fig.add_hline(
            y=labels.index(level_bin), line_dash="dash", line_color="red", annotation_text=f"{m.precision} level"
        )
    fig.update_layout(
        title="|log p_trainer - log p_rollout| per token, by step",
        xaxis_title="step",
        yaxis_title="|delta| bin (lower edge)",
        **_LAYOUT,
    )
    # four bins a decade: label the decades only (left alone, plotly labels every other bin, 2e-07,
    # 6e-07, ...); bin 0, [0, 1e-07), is the row under 1e-07, too close for a label of its own
    fig.update_yaxes(tickmode="array", tickvals=labels[1::LOGPROB_BINS_PER_DECADE])
    return fig


def reward_by_source(d: Diagnosis) -> go.Figure | None:
    r = d.rewards
    if r is None or not r.available:
        return None
    fig = go.Figure()
    for source, rows in r.by_step.groupby("source"):
        fig.add_scatter(x=rows["step"], y=rows["mean_reward"], mode="lines+markers", name=f"{_safe(source)} reward")
        if rows["error_rate"].max() > 0:
            fig.add_bar(x=rows["step"], y=rows["error_rate"], name=f"{_safe(source)} error rate", opacity=0.5)
    fig.update_layout(title="Reward by data source, and reward-service error rate", xaxis_title="step", **_LAYOUT)
    return fig


_WHOLE_TICKS_UP_TO = 12  # GPUs apart: over a wider range plotly's own ticks (2, 5, 10 apart) are whole


def split_drift(d: Diagnosis) -> go.Figure | None:
    p = d.drift.per_step
    if p.empty:
        return None
    fig = go.Figure(go.Scatter(x=p.index, y=p["best_rollout"], mode="lines+markers", name="balanced rollout GPUs"))
    if d.topology.n_rollout:
        fig.add_hline(y=d.topology.n_rollout, line_dash="dash", annotation_text="current rollout GPUs")
    fig.update_layout(
        title=f"Balanced split over the run ({_safe(d.drift.topology.replace('_', ' '))})",
        xaxis_title="step",
        yaxis_title=f"rollout GPUs of {d.drift.n_gpus}",
        **_LAYOUT,
    )
    # whole GPUs: over a narrow range plotly would tick halves (24.5 GPUs)
    shown = [*p["best_rollout"].dropna(), *([d.topology.n_rollout] if d.topology.n_rollout else [])]
    if shown and max(shown) - min(shown) <= _WHOLE_TICKS_UP_TO:
        fig.update_yaxes(dtick=1)
    return fig


def all_figures(reader: RunReader, d: Diagnosis) -> list[tuple[str, go.Figure]]:
    """(section title, figure) for every picture the run has evidence for."""
    figures: list[tuple[str, go.Figure | None]] = [
        ("Where each step's time went", phase_stack(d)),
        ("MFU waterfall", waterfall(d)),
        ("Long tail", finish_cdf(reader, d)),
        ("Trainer vs rollout log-probs", mismatch_heatmap(d)),
        ("Rewards", reward_by_source(d)),
        ("Split drift", split_drift(d)),
    ]
    return [(title, fig) for title, fig in figures if fig is not None]
