"""Figure builders: pandas frames in, plotly Figures out, nothing read or remembered.

Kept apart from the pages so each chart can be tested on a sample trace without a
server or a browser. Builders that take ``runs`` (a mapping of run label to that run's
frame) overlay the runs when there are several; with one run they show its detail (phases
stacked, a heatmap, a band of quantiles). Empty inputs give a placeholder figure that says
what is missing, never an exception. Strings from the data (run labels, data sources,
engines, hosts) are escaped, because plotly renders a little HTML in text.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rlscope.advice.finding import fmt_seconds
from rlscope.advice.thresholds import (
    LONG_TAIL_WARN,
    MISMATCH_LEVEL_BF16,
    MISMATCH_LEVEL_FP8,
    MOE_FLIP_DELTA,
    REWARD_ERROR_WARN,
)
from rlscope.analyzers.anatomy import PHASES
from rlscope.analyzers.longtail import tail_split
from rlscope.analyzers.mfu import CAUSES, cause_label, drawn_causes
from rlscope.analyzers.mismatch import abs_quantiles
from rlscope.analyzers.topology import POOLED
from rlscope.trace.schema import LOGPROB_BIN_EDGES

__all__ = [
    "MAX_POINTS",
    "PHASE_ORDER",
    "bin_centres",
    "engine_load",
    "finish_cdf",
    "gpu_timeline",
    "idle_ratios",
    "mfu_compare",
    "mfu_waterfall",
    "mismatch_heatmap",
    "mismatch_quantiles",
    "placeholder",
    "response_lengths",
    "reward_by_source",
    "split_curve",
    "split_drift",
    "staleness",
    "staleness_vs_length",
    "step_phases",
    "step_time_compare",
    "tail_shares",
    "text",
    "thin",
    "zero_vs_error",
]

MAX_POINTS = 600
"""Most points a per-step series sends to the browser; longer runs are averaged over buckets of steps."""

PHASE_ORDER: tuple[str, ...] = (*PHASES, "other")
_STAGE_PHASE = {stage: phase for phase, stages in PHASES.items() for stage in stages}  # verl stage -> phase

_PALETTE = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#E45756",
    "#72B7B2",
    "#B279A2",
    "#FF9DA6",
    "#9D755D",
    "#BAB0AC",
    "#EECA3B",
    "#2E86AB",
    "#8CD17D",
    "#D37295",
    "#499894",
)
_PHASE_COLORS = dict(zip(PHASE_ORDER, _PALETTE, strict=False)) | {"other": "#7F7F7F"}
_HEIGHT = 380
_LEGEND = {
    "orientation": "h",
    "yanchor": "top",
    "y": -0.3,
    "x": 0.0,
    "xanchor": "left",
}  # under the plot, clear of the title
# beside the plot, for bars over long category names: the names, turned, take the room under
# the axis that automargin gives them, which a legend under the plot (placed at a share of the
# plot's height) would cover with several runs
_LEGEND_RIGHT = {"orientation": "v", "yanchor": "top", "y": 1.0, "x": 1.02, "xanchor": "left"}
_LENGTH_COUNT_RUNS = 2  # n= over the bars of more runs than this is too small to read
_GRID = {"gridcolor": "#ebebeb", "zerolinecolor": "#d9d9d9", "automargin": True}
# a lean template made once: plotly copies the template into every figure, and its stock ones
# ("plotly_white") cost ~20 ms a figure, more than the rest of a refresh's figures together
_TEMPLATE = go.layout.Template(
    layout={
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"color": "#2a3f5f"},
        "colorway": list(_PALETTE),
        "xaxis": _GRID,
        "yaxis": _GRID,
        "hoverlabel": {"align": "left"},
    }
)
_GPU_PALETTE = ("#1f2937", "#7c3aed", "#0f766e", "#b45309", "#be123c", "#1d4ed8", "#4d7c0f", "#6b21a8")
_CDF_POINTS = 2000  # a CDF of more trajectories is drawn through this many of them (always the last)


def text(value: object) -> str:
    """A data string made safe for plotly's text, which would otherwise render its tags."""
    return html.escape(str(value), quote=False)


def _color(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def _run_colors(runs: Mapping[str, object]) -> dict[str, str]:
    """Each run's colour by its place in the selection, taken before runs without data are
    dropped: a run keeps its colour in every chart, even where an earlier run has nothing."""
    return {label: _color(i) for i, label in enumerate(runs)}


def _blank() -> go.Figure:
    return go.Figure(layout={"template": _TEMPLATE})


def _figure(title: str, x: str, y: str, *, height: int = _HEIGHT) -> go.Figure:
    fig = _blank()
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 45},
        legend=_LEGEND,
        uirevision="keep",  # keep the user's zoom across live refreshes
        xaxis_title=x,
        yaxis_title=y,
    )
    return fig


def placeholder(message: str, title: str = "") -> go.Figure:
    """An empty figure that says why there is nothing to draw."""
    fig = _figure(title, "", "", height=260)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(text=text(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def thin(frame: pd.DataFrame, max_points: int = MAX_POINTS, how: str = "mean") -> pd.DataFrame:
    """At most ``max_points`` rows: runs of consecutive steps averaged (or summed), labelled by their last step.

    Why: a browser draws 600 bars as fast as 60, and a refresh of a 5,000-step run must not
    send 5,000 points per series.
    """
    n = len(frame)
    if n <= max_points:
        return frame
    size = math.ceil(n / max_points)
    buckets = np.arange(n) // size
    numeric = frame.select_dtypes("number")
    out = numeric.groupby(buckets).sum() if how == "sum" else numeric.groupby(buckets).mean()
    ends = np.minimum((np.arange(len(out)) + 1) * size, n) - 1
    out.index = pd.Index(frame.index.to_numpy()[ends], name=frame.index.name)
    return out


def _steps_title(title: str, frame: pd.DataFrame, shown: pd.DataFrame) -> str:
    if len(shown) < len(frame):
        return f"{title} (mean per {math.ceil(len(frame) / len(shown))} steps)"
    return title


# -- overview ------------------------------------------------------------------------------


def step_phases(seconds: pd.DataFrame, *, overlapped: bool = False) -> go.Figure:
    """Step time stacked by phase (anatomy's ``phase_seconds``); overlapped generation drawn as a line."""
    if seconds.empty:
        return placeholder("no step timers (timing_s/*) recorded yet", "Step time by phase")
    shown = thin(seconds)
    fig = _figure(_steps_title("Step time by phase", seconds, shown), "step", "seconds")
    for phase in PHASE_ORDER:
        if phase not in shown or not (shown[phase] > 0).any() or (overlapped and phase == "gen"):
            continue
        fig.add_bar(x=shown.index, y=shown[phase], name=phase, marker_color=_PHASE_COLORS[phase])
    if overlapped and "gen" in shown and (shown["gen"] > 0).any():
        fig.add_scatter(
            x=shown.index,
            y=shown["gen"],
            name="gen (beside the step)",
            mode="lines",
            line={"color": "#333", "dash": "dot"},
        )
    fig.update_layout(barmode="stack", bargap=0.1)
    return fig


def step_time_compare(runs: Mapping[str, pd.Series]) -> go.Figure:
    """Whole-step seconds per step, one line per run."""
    colors = _run_colors(runs)
    runs = {k: v.dropna() for k, v in runs.items() if not v.dropna().empty}
    if not runs:
        return placeholder("no step timers (timing_s/*) recorded yet", "Step time")
    fig = _figure("Step time", "step", "seconds")
    for label, series in runs.items():
        shown = _broken_at_gaps(thin(series.to_frame("s"))["s"])
        fig.add_scatter(x=shown.index, y=shown, name=text(label), mode="lines+markers", line={"color": colors[label]})
    return fig


def _broken_at_gaps(series: pd.Series) -> pd.Series:
    """``series`` with NaN where a step is missing from its usual spacing (a step timer logged as
    inf or NaN has no length), so its line breaks there instead of bridging the step as if timed."""
    if len(series) < 3:
        return series
    steps = series.index.to_numpy(dtype=float)
    gaps = np.diff(steps)
    usual = float(np.median(gaps))
    holes = steps[:-1][gaps > usual] + usual
    if not len(holes):
        return series
    return pd.concat([series, pd.Series(np.nan, index=holes.astype(series.index.dtype))]).sort_index()


def mfu_waterfall(lost: pd.Series, mfu: float, title: str = "MFU waterfall", tail_estimated: bool = False) -> go.Figure:
    """From 100% of peak to the whole-step MFU: the points each cause took (they sum to 100 - MFU).
    The bars are those every report draws (:func:`~rlscope.analyzers.mfu.drawn_causes`): where some
    steps' tail is unknown, one "decode + long tail (split unknown)" bar holds their generation."""
    if lost.empty or math.isnan(mfu):
        return placeholder("MFU needs meta.json's model size, GPU count and peak FLOP/s, and step timers", title)
    causes = drawn_causes(lost.reindex([c for c in CAUSES if c in lost.index]))
    fig = _figure(title, "", "% of peak over the whole step")
    fig.add_waterfall(
        x=["peak", *(cause_label(c, tail_estimated) for c in causes), "MFU"],
        y=[100.0, *(-float(lost[c]) for c in causes), 0.0],
        measure=["absolute", *(["relative"] * len(causes)), "total"],
        # a cause that cost nothing (the tail of a streaming run) reads 0, not -0.0
        text=["100", *(f"-{lost[c]:.1f}" if round(lost[c], 1) else "0" for c in causes), f"{100 * mfu:.1f}"],
        textposition="outside",
        decreasing={"marker": {"color": "#E45756"}},
        totals={"marker": {"color": "#4C78A8"}},
        increasing={"marker": {"color": "#54A24B"}},
        connector={"line": {"color": "#BAB0AC"}},
        name="points",
        showlegend=False,
    )
    fig.update_yaxes(range=[0, 112])
    return fig


def mfu_compare(runs: Mapping[str, tuple[pd.Series, float, bool]], lower_bounds: Collection[str] = ()) -> go.Figure:
    """Points lost per cause and the resulting MFU, one bar group per run: ``(lost, mfu,
    tail_estimated)``. The runs share one axis of causes, so a run's name in the legend says
    when its long tail is estimated from response lengths, or unknown in some of its steps (whose
    generation is its "decode + long tail" bar), and when its MFU is a lower bound (a
    label in ``lower_bounds``: a timed critic of unknown size). The legend shows even when one run
    is left, so its bars are never unnamed."""
    colors = _run_colors(runs)
    runs = {k: v for k, v in runs.items() if not v[0].empty and not math.isnan(v[1])}
    if not runs:
        return placeholder("MFU needs meta.json's model size, GPU count and peak FLOP/s", "MFU: points lost per cause")
    fig = _figure("MFU: points lost per cause", "", "points of 100")
    drawn = {label: set(drawn_causes(lost)) for label, (lost, _, _) in runs.items()}
    # one axis in CAUSES order: a bar one run lacks (its tail known or unknown in every step) is a gap
    causes = [c for c in CAUSES if any(c in d for d in drawn.values())]
    for label, (lost, mfu, tail_estimated) in runs.items():
        note = " (long tail estimated)" if tail_estimated else ""
        if "decode_long_tail" in drawn[label]:
            known = "long_tail" in drawn[label]  # the steps whose tail is known still have theirs apart
            note = f" (long tail {'unknown in some steps' if known else 'unknown'}: in decode + long tail" + (
                ", estimated in the rest)" if known and tail_estimated else ")"
            )
        fig.add_bar(
            x=[*(cause_label(c, False) for c in causes), "MFU"],
            y=[*(float(lost[c]) if c in drawn[label] else math.nan for c in causes), 100 * mfu],
            name=text(label)
            + note
            + (" (MFU a lower bound: the critic is not counted)" if label in lower_bounds else ""),
            marker_color=colors[label],
        )
    fig.update_layout(barmode="group", legend=_LEGEND_RIGHT, showlegend=True)
    return fig


# -- rollout -------------------------------------------------------------------------------


def finish_cdf(runs: Mapping[str, np.ndarray], step: int | None) -> go.Figure:
    """Share of a step's trajectories finished by each time; the slowest 10% are the tail."""
    title = "Trajectory finish times" + (f", step {step}" if step is not None else "")
    colors = _run_colors(runs)
    runs = {k: np.sort(np.asarray(v, dtype=float)[np.isfinite(np.asarray(v, dtype=float))]) for k, v in runs.items()}
    runs = {k: v for k, v in runs.items() if v.size}
    if not runs:
        return placeholder("no trajectory finish times for this step", title)
    fig = _figure(title, "seconds since the rollout began", "share of trajectories finished")
    for label, t in runs.items():
        y = np.arange(1, t.size + 1) / t.size
        keep = np.unique(np.linspace(0, t.size - 1, min(t.size, _CDF_POINTS)).round().astype(int))
        fig.add_scatter(
            x=t[keep], y=y[keep], name=text(label), mode="lines", line={"shape": "hv", "color": colors[label]}
        )
    first, last = min(t[0] for t in runs.values()), max(t[-1] for t in runs.values())
    split = tail_split(next(iter(runs.values()))) if len(runs) == 1 else None
    if split is not None and not math.isnan(split.t_thr_s + split.t_tail_s):  # one trajectory: no t90
        fig.add_vline(x=split.t_thr_s, line={"dash": "dash", "color": "#E45756"})
        fig.add_annotation(
            x=split.t_thr_s,
            y=0.5,
            text=f"t90 = {fmt_seconds(split.t_thr_s)} s: the slowest 10% hold the last {split.tail_share:.0%} of the rollout",
            showarrow=False,
            # the text runs into the half of the plot with room for it
            xanchor="left" if split.t_thr_s < (first + last) / 2 else "right",
            bgcolor="rgba(255,255,255,0.8)",
        )
    # the finish times' own span: left to itself, plotly widens the axis to hold the annotation's text
    pad = 0.02 * (last - first) or 1.0  # one finish time: a second either side
    fig.update_xaxes(range=[first - pad, last + pad])
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    return fig


def tail_shares(
    runs: Mapping[str, pd.Series],
    bounds: Mapping[str, pd.Series] | None = None,
    capped: Mapping[str, pd.Series] | None = None,
) -> go.Figure:
    """Per step, the share of rollout time spent waiting for the slowest 10% of trajectories.
    ``bounds``: per run, the most the share can be in the steps whose estimate from response lengths
    is unknown, drawn dotted and named a bound, so such a run shows what is known, never a value.
    ``capped``: per run, the steps whose estimate is 0 because over 10% of responses hit the length
    cap, drawn as markers apart from the line, which is the trend diagnose judges without them."""
    colors = _run_colors(runs)
    bounds = {k: v.dropna() for k, v in (bounds or {}).items() if k in colors and not v.dropna().empty}
    capped = {k: v.dropna() for k, v in (capped or {}).items() if k in colors and not v.dropna().empty}
    runs = {k: v.dropna() for k, v in runs.items() if not v.dropna().empty}
    title = "Slowest 10%: share of rollout time"
    if not runs and not bounds and not capped:
        return placeholder("no rollout timing yet (trajectories or response lengths)", title)
    fig = _figure(title, "step", "tail share (T_tail / rollout)")
    # each run's shares as a line, its bounds dotted, its steps at the length cap as x markers apart
    traces: list[tuple[dict[str, pd.Series], str, Callable[[str], dict[str, Any]]]] = [
        (runs, "", lambda color: {"mode": "lines+markers", "line": {"color": color}}),
        (
            bounds,
            ": at most (no estimate)",
            lambda color: {"mode": "lines+markers", "line": {"color": color, "dash": "dot"}},
        ),
        (
            capped,
            ": 0 at the length cap (tail cut short)",
            lambda color: {"mode": "markers", "marker": {"color": color, "symbol": "x"}},
        ),
    ]
    for by_label, suffix, style in traces:
        for label, series in by_label.items():
            shown = thin(series.to_frame("f"))["f"]
            fig.add_scatter(x=shown.index, y=shown, name=text(label) + suffix, **style(colors[label]))
    if bounds or capped:  # a lone trace hides the legend, and with it the name that says what the points are
        fig.update_layout(showlegend=True)
    fig.add_hline(y=LONG_TAIL_WARN, line={"dash": "dot", "color": "#E45756"}, annotation_text="warn")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    return fig


def response_lengths(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """Response tokens per step: p10-p90 band, median and max (one run), or medians (several)."""
    colors = _run_colors(runs)
    runs = {k: v for k, v in runs.items() if not v.empty and v.notna().any().any()}
    title = "Response length"
    if not runs:
        return placeholder("no response lengths yet", title)
    fig = _figure(title, "step", "response tokens")
    if len(runs) == 1:
        frame = next(iter(runs.values()))
        shown = thin(frame)
        fig.update_layout(title_text=_steps_title(title, frame, shown))
        if shown["p90"].notna().any():
            fig.add_scatter(x=shown.index, y=shown["p90"], name="p90", mode="lines", line={"color": "#9ecae1"})
            fig.add_scatter(
                x=shown.index,
                y=shown["p10"],
                name="p10",
                mode="lines",
                line={"color": "#9ecae1"},
                fill="tonexty",
                fillcolor="rgba(76,120,168,0.15)",
            )
            fig.add_scatter(x=shown.index, y=shown["p50"], name="median", mode="lines", line={"color": "#4C78A8"})
        else:
            fig.add_scatter(x=shown.index, y=shown["mean"], name="mean", mode="lines", line={"color": "#4C78A8"})
        fig.add_scatter(
            x=shown.index, y=shown["max"], name="max", mode="lines", line={"color": "#E45756", "dash": "dot"}
        )
        return fig
    for label, frame in runs.items():
        shown = thin(frame)
        column = "p50" if shown["p50"].notna().any() else "mean"
        fig.add_scatter(
            x=shown.index,
            y=shown[column],
            name=f"{text(label)} ({column})",
            mode="lines",
            line={"color": colors[label]},
        )
    return fig


def _engine_key(name: str) -> tuple[str, int]:
    match = re.match(r"(.*?)(\d+)$", name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)


def engine_load(runs: Mapping[str, pd.DataFrame], step: int | None) -> go.Figure:
    """Load per rollout engine at one step (``engine``, ``load``, ``unit`` rows); the mean dashed."""
    title = "Per-engine load" + (f", step {step}" if step is not None else "")
    colors = _run_colors(runs)
    runs = {k: v for k, v in runs.items() if not v.empty}
    if not runs:
        return placeholder("no engine recorded for this step's trajectories", title)
    unit = str(next(iter(runs.values()))["unit"].iloc[0])
    fig = _figure(title, "engine", unit.replace("_", " "))
    for label, frame in runs.items():
        frame = frame.assign(engine=frame["engine"].astype(str))
        frame = frame.iloc[sorted(range(len(frame)), key=lambda j: _engine_key(frame["engine"].iloc[j]))]
        fig.add_bar(x=[text(e) for e in frame["engine"]], y=frame["load"], name=text(label), marker_color=colors[label])
        if len(runs) == 1:
            loads = frame["load"].to_numpy(dtype=float)
            mean = float(loads.mean())
            cv = float(loads.std() / mean) if mean > 0 else math.nan
            fig.add_hline(y=mean, line={"dash": "dash", "color": "#333"}, annotation_text="mean")
            fig.update_layout(
                title_text=f"{title}: CV {cv:.0%}, engines {mean / loads.max():.0%} utilised", showlegend=False
            )
    fig.update_layout(barmode="group", legend=_LEGEND_RIGHT)
    return fig


# -- async ---------------------------------------------------------------------------------


def idle_ratios(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """verl fully_async's trainer and rollouter idle ratios per step."""
    colors = _run_colors(runs)
    runs = {k: v for k, v in runs.items() if not v.empty}
    title = "Idle ratios (fully_async)"
    if not runs:
        return placeholder("no fully_async/*/idle_ratio metrics: verl logs them only in async runs", title)
    fig = _figure(title, "step", "idle share of the step")
    _run_lines(fig, runs, ("trainer", "rollouter"), colors)
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    return fig


def _run_lines(
    fig: go.Figure, runs: Mapping[str, pd.DataFrame], columns: tuple[str, str], colors: Mapping[str, str]
) -> None:
    """Each run's two ``columns`` by step, a solid and a dotted line in the run's colour."""
    for label, frame in runs.items():
        shown = thin(frame)
        for column, dash in zip(columns, ("solid", "dot"), strict=True):
            if column in shown:
                name = column if len(runs) == 1 else f"{text(label)} · {column}"
                line = {"color": colors[label], "dash": dash}
                fig.add_scatter(x=shown.index, y=shown[column], name=name, mode="lines+markers", line=line)


def staleness(runs: Mapping[str, pd.DataFrame], verl: Mapping[str, pd.DataFrame] | None = None) -> go.Figure:
    """Staleness of consumed samples per step (``lag``, ``n`` rows by step): shares stacked, or
    mean lag per run. When no run has them, verl's own mean and max lag per step are drawn
    (``verl``: ``mean``, ``max`` by step), as diagnose takes them."""
    colors = _run_colors(runs or verl or {})
    runs = {k: v for k, v in runs.items() if not v.empty}
    title = "Staleness of consumed samples"
    verl = {k: v for k, v in (verl or {}).items() if not v.empty}
    if verl and not runs:
        return _verl_staleness(verl, title, colors)
    if not runs:
        return placeholder("no policy versions on the trajectories (policy_version_start, trainer_version)", title)
    if len(runs) == 1:
        counts = next(iter(runs.values()))
        table = counts.pivot_table(index=counts.index, columns="lag", values="n", aggfunc="sum", fill_value=0)
        table = thin(table, how="sum")
        shares = table.div(table.sum(axis=1), axis=0)
        fig = _figure(title, "step", "share of samples")
        for j, lag in enumerate(shares.columns):
            fig.add_bar(x=shares.index, y=shares[lag], name=f"{lag} behind", marker_color=_color(j))
        fig.update_layout(barmode="stack", bargap=0.1)
        fig.update_yaxes(tickformat=".0%")
        return fig
    fig = _figure(title + ": mean lag", "step", "policy versions behind")
    for label, counts in runs.items():
        weighted = (counts["lag"] * counts["n"]).groupby(level=0).sum() / counts["n"].groupby(level=0).sum()
        shown = thin(weighted.to_frame("lag"))["lag"]
        fig.add_scatter(x=shown.index, y=shown, name=text(label), mode="lines+markers", line={"color": colors[label]})
    return fig


def _verl_staleness(runs: Mapping[str, pd.DataFrame], title: str, colors: Mapping[str, str]) -> go.Figure:
    fig = _figure(title + " (verl's trajectory_staleness_worst)", "step", "policy versions behind")
    _run_lines(fig, runs, ("mean", "max"), colors)
    fig.update_yaxes(rangemode="tozero")
    return fig


def staleness_vs_length(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """Mean response tokens at each staleness: long answers are staler, so dropping stale ones drops long ones.
    Each bar's sample count is written over it for up to two runs, and is in its hover always."""
    colors = _run_colors(runs)
    runs = {k: v for k, v in runs.items() if not v.empty}
    title = "Staleness vs response length (recent steps)"
    if not runs:
        return placeholder("no policy versions on the trajectories", title)
    fig = _figure(title, "policy versions behind", "mean response tokens")
    counted = len(runs) <= _LENGTH_COUNT_RUNS
    for label, frame in runs.items():
        counts = [f"n={n:,}" for n in frame["n"]]
        fig.add_bar(
            x=frame.index,
            y=frame["mean_tokens"],
            name=text(label),
            marker_color=colors[label],
            text=counts if counted else None,
            textposition="outside",
            constraintext="none",  # at the font's size, not shrunk to the bar's width
            customdata=counts,
            hovertemplate="%{x} behind: %{y:,.0f} tokens, %{customdata}",
        )
    fig.update_layout(barmode="group", showlegend=len(runs) > 1)
    fig.update_xaxes(dtick=1)
    return fig


# -- mismatch ------------------------------------------------------------------------------


def bin_centres() -> np.ndarray:
    """log10 of the middle of each |delta| histogram bin (the open first and last bins get a width of one bin)."""
    lo, hi = LOGPROB_BIN_EDGES[:-1], LOGPROB_BIN_EDGES[1:]
    with np.errstate(divide="ignore"):
        llo, lhi = np.log10(lo), np.log10(hi)
    width = lhi[1] - llo[1]
    llo = np.where(np.isfinite(llo), llo, lhi - width)
    lhi = np.where(np.isfinite(lhi), lhi, llo + width)
    return (llo + lhi) / 2


def _thresholds(fig: go.Figure, level: float | None) -> None:
    """Dashed lines at the normal mismatch of bf16 and fp8 rollouts and at MoE routing flips; ``level`` solid."""
    for value, label in (
        (MISMATCH_LEVEL_BF16, "bf16 normal"),
        (MISMATCH_LEVEL_FP8, "fp8 normal"),
        (MOE_FLIP_DELTA, "MoE routing flip"),
    ):
        own = level is not None and math.isclose(value, level)
        fig.add_hline(
            y=math.log10(value),
            line={"color": "#E45756" if own else "#333", "dash": "solid" if own else "dash", "width": 1.5},
            annotation_text=f"{label} ({value:g})",
            annotation_position="top left",
            annotation_bgcolor="rgba(255,255,255,0.85)",  # readable on the heatmap's bright cells
            annotation_borderpad=2,
        )


def mismatch_heatmap(
    hist: pd.DataFrame, level: float | None = None, title: str = "Trainer vs rollout log-prob mismatch per token"
) -> go.Figure:
    """Per step, the share of tokens in each |log p_trainer - log p_rollout| bin; ``level`` (normal for the run's precision) solid."""
    if hist.empty or not hist.to_numpy().sum():
        return placeholder("no log-prob histograms (logprob table) recorded yet", title)
    summed = thin(hist, how="sum")
    counts = summed.to_numpy(dtype=float)
    totals = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log10(counts / np.where(totals > 0, totals, np.nan))
    z[~np.isfinite(z)] = np.nan
    fig = _figure(_steps_title(title, hist, summed), "step", "|Δ log p| per token", height=440)
    fig.add_heatmap(
        x=summed.index,
        y=bin_centres(),
        z=z.T,
        colorscale="Viridis",
        colorbar={"title": {"text": "log10 share"}},
        hovertemplate="step %{x}<br>|Δ| ~ 1e%{y:.2f}<br>share 1e%{z:.1f}<extra></extra>",
        name="share of tokens",
    )
    _thresholds(fig, level)
    ticks = list(range(-7, 3))
    fig.update_yaxes(tickvals=ticks, ticktext=[f"1e{t}" for t in ticks])
    return fig


def mismatch_quantiles(runs: Mapping[str, pd.DataFrame], level: float | None = None) -> go.Figure:
    """Median and p99 per-token |delta| per step (from the histograms), one pair of lines per run."""
    colors = _run_colors(runs)
    runs = {k: v for k, v in runs.items() if not v.empty}
    title = "Median and p99 |Δ log p|"
    if not runs:
        return placeholder("no log-prob histograms (logprob table) recorded yet", title)
    fig = _figure(title, "step", "|Δ log p| per token")
    for label, hist in runs.items():
        summed = thin(hist, how="sum")
        counts = summed.to_numpy(dtype=float)
        for q, dash in ((0.5, "solid"), (0.99, "dot")):
            values = abs_quantiles(counts, q)
            name = f"p{round(q * 100)}" if len(runs) == 1 else f"{text(label)} p{round(q * 100)}"
            fig.add_scatter(
                x=summed.index,
                y=np.log10(np.where(values > 0, values, np.nan)),
                name=name,
                mode="lines+markers",
                line={"color": colors[label], "dash": dash},
            )
    _thresholds(fig, level if len(runs) == 1 else None)
    ticks = list(range(-7, 3))
    fig.update_yaxes(tickvals=ticks, ticktext=[f"1e{t}" for t in ticks])
    return fig


# -- rewards -------------------------------------------------------------------------------


def _by_source(runs: Mapping[str, pd.DataFrame]) -> list[tuple[str, pd.DataFrame]]:
    """(legend name, per-step rows) for every (run, data source)."""
    out = []
    for label, frame in runs.items():
        for source, rows in frame.groupby("source", sort=True):
            name = text(source) if len(runs) == 1 else f"{text(label)} · {text(source)}"
            out.append((name, rows))
    return out


def reward_by_source(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """Mean scored reward per step for each data source (rewards ``by_step`` rows)."""
    runs = {k: v for k, v in runs.items() if not v.empty}
    title = "Reward by data source"
    if not runs:
        return placeholder("no rewards on the trajectories yet", title)
    fig = _figure(title, "step", "mean reward (scored samples)")
    for i, (name, rows) in enumerate(_by_source(runs)):
        fig.add_scatter(x=rows.index, y=rows["mean_reward"], name=name, mode="lines+markers", line={"color": _color(i)})
    return fig


def zero_vs_error(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """A zero reward is legal, an error is not: zero share and error rate per source, one above the other."""
    runs = {k: v for k, v in runs.items() if not v.empty}
    title = "Zero share vs error rate by data source"
    if not runs:
        return placeholder("no rewards on the trajectories yet", title)
    fig = make_subplots(
        figure=_blank(),
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=("zero share of scored rewards (legal)", "error rate (no reward: the service failed)"),
    )
    for i, (name, rows) in enumerate(_by_source(runs)):
        style = {"color": _color(i)}
        fig.add_scatter(
            x=rows.index,
            y=rows["zero_share"],
            name=name,
            legendgroup=name,
            mode="lines+markers",
            line=style,
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=rows.index,
            y=rows["error_rate"],
            name=name,
            legendgroup=name,
            showlegend=False,
            mode="lines+markers",
            line=style,
            row=2,
            col=1,
        )
    fig.add_hline(y=REWARD_ERROR_WARN, line={"dash": "dot", "color": "#E45756"}, row=2, col=1)
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=520,
        margin={"l": 60, "r": 20, "t": 80, "b": 45},
        uirevision="keep",
        legend={**_LEGEND, "y": -0.16},
    )
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    fig.update_yaxes(title_text="zero share", row=1, col=1)
    fig.update_yaxes(title_text="error rate", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    return fig


# -- gpu -----------------------------------------------------------------------------------


def gpu_timeline(runs: Mapping[str, tuple[pd.DataFrame, pd.DataFrame]], max_points: int = 3000) -> go.Figure:
    """NVML utilisation per GPU above the phase spans of the same seconds: the sawtooth made visible.

    Each run gets two rows: utilisation lines (one per host:gpu) and phase bars per role.
    Time is seconds since the first span or sample shown.
    """
    runs = {k: v for k, v in runs.items() if not v[0].empty or not v[1].empty}
    title = "GPU utilisation and phases"
    if not runs:
        return placeholder("no NVML samples (gpu table) or phase spans recorded yet", title)
    titles = []
    for label in runs:
        prefix = f"{text(label)}: " if len(runs) > 1 else ""
        titles += [f"{prefix}utilisation per GPU (NVML)", f"{prefix}phases"]
    fig = make_subplots(
        figure=_blank(),
        rows=2 * len(runs),
        cols=1,
        shared_xaxes=True,
        # plotly allows at most 1 / (rows - 1): six runs' twelve rows need less than 0.1
        vertical_spacing=min(0.1, 0.5 / max(1, 2 * len(runs) - 1)),
        row_heights=[0.65, 0.35] * len(runs),
        subplot_titles=titles,
    )
    shown_phases: set[str] = set()
    for r, (gpu, spans) in enumerate(runs.values()):
        starts = [
            s
            for s in (spans["start"].min() if not spans.empty else None, gpu["time"].min() if not gpu.empty else None)
            if s is not None
        ]
        t0 = float(min(starts))
        row = 2 * r + 1
        for i, ((host, idx), samples) in enumerate(gpu.groupby(["host", "gpu"], sort=True)):
            samples = samples.sort_values("time")
            step = max(1, math.ceil(len(samples) / max_points))
            samples = samples.iloc[::step]
            role = samples["role"].dropna()
            name = f"{text(host)}:{idx}" + (f" ({text(role.iloc[0])})" if len(role) else "")
            fig.add_scatter(
                x=samples["time"] - t0,
                y=samples["util_pct"],
                name=name,
                mode="lines",
                line={"color": _GPU_PALETTE[i % len(_GPU_PALETTE)], "width": 1.2},
                row=row,
                col=1,
            )
        phases = spans[spans["phase"] != "step"] if not spans.empty else spans
        # a stage by its phase, as the Overview's step anatomy names and colours it (param_sync: weight_sync)
        named = phases["phase"].map(lambda stage: _STAGE_PHASE.get(stage, stage))
        for phase, rows in phases.groupby(named, sort=False):
            fig.add_bar(
                base=rows["start"] - t0,
                x=rows["end"] - rows["start"],
                y=[text(v) for v in rows["role"].fillna("?")],
                orientation="h",
                name=text(phase),
                legendgroup=f"phase:{phase}",
                showlegend=phase not in shown_phases,
                marker_color=_PHASE_COLORS.get(str(phase), "#7F7F7F"),
                row=row + 1,
                col=1,
            )
            shown_phases.add(str(phase))
        fig.update_yaxes(title_text="util %", range=[0, 105], row=row, col=1)
    fig.update_xaxes(title_text="seconds since the window began", row=2 * len(runs), col=1)
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=max(_HEIGHT + 100, 460 * len(runs)),
        barmode="overlay",
        margin={"l": 60, "r": 20, "t": 80, "b": 45},
        uirevision="keep",
        legend={**_LEGEND, "y": -0.16},
    )
    return fig


# -- advice --------------------------------------------------------------------------------


def split_curve(splits: pd.DataFrame, current_rollout: int | None = None) -> go.Figure:
    """Predicted step time of each pooled topology at every rollout:train split (topology ``split_table``)."""
    title = "Predicted step time by split"
    if splits.empty:
        return placeholder("no split to predict: one GPU cannot be split into two pools", title)
    fig = _figure(title, "rollout GPUs (the rest train)", "predicted step seconds")
    for i, topology in enumerate(t for t in POOLED if t in splits):
        column = splits[topology]
        best = int(column.idxmin())
        fig.add_scatter(
            x=splits.index, y=column, name=topology.replace("_", " "), mode="lines", line={"color": _color(i)}
        )
        fig.add_scatter(
            x=[best],
            y=[column.loc[best]],
            mode="markers",
            marker={"color": _color(i), "size": 10, "symbol": "diamond"},
            name=f"best {topology.replace('_', ' ')}: {best}:{int(splits.loc[best, 'n_train'])}",
        )
    if current_rollout:
        fig.add_vline(x=current_rollout, line={"dash": "dash", "color": "#333"}, annotation_text="current split")
    low = float(splits[[t for t in POOLED if t in splits]].min().min())
    fig.update_yaxes(range=[0, 3 * low])
    return fig


def split_drift(runs: Mapping[str, pd.DataFrame], current: Mapping[str, int | None] | None = None) -> go.Figure:
    """Each step's best rollout share of the GPUs (drift ``best_rollout``): how the balanced split moves."""
    colors = _run_colors(runs)
    runs = {k: v for k, v in runs.items() if not v.empty}
    title = "Balanced split over the run"
    if not runs:
        return placeholder(
            "the split per step needs meta.json's GPU count and step timers (an async run on separate pools also its "
            "split and verl's occupancy share or rollouter idle ratio)",
            title,
        )
    topology = str(next(iter(runs.values()))["topology"].iloc[0]).replace("_", " ")
    fig = _figure(f"{title} ({topology})", "step", "rollout GPUs of the best split")
    for label, frame in runs.items():
        shown = thin(frame)
        fig.add_scatter(
            x=shown.index,
            y=shown["best_rollout"],
            name=text(label),
            mode="lines+markers",
            line={"color": colors[label]},
        )
        now = (current or {}).get(label)
        if now:
            fig.add_hline(
                y=now, line={"dash": "dash", "color": colors[label]}, annotation_text=f"{text(label)}: current"
            )
    fig.update_yaxes(
        tickformat="d", dtick=max(1, math.ceil(max(float(v["best_rollout"].max()) for v in runs.values()) / 10))
    )
    return fig
