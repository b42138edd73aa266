"""GPU: NVML utilisation of each sampled GPU over the last few steps, above the phase spans.

Aligning the two shows the sawtooth: learner GPUs near 0% while the rollout decodes its
tail, rollout GPUs idle while the trainer updates.
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


_WINDOWS = (1, 3, 10, 30)


def layout(**_: object) -> html.Div:
    return html.Div(
        [
            html.Div(id="gpu-notices"),
            html.Label(
                [
                    "Last steps shown: ",
                    dcc.RadioItems(
                        id="gpu-steps",
                        options=[{"label": str(n), "value": n} for n in _WINDOWS],
                        value=3,
                        inline=True,
                    ),
                ],
                className="rls-control",
            ),
            common.graph("gpu-timeline"),
            dcc.Store(id="gpu-seen"),
        ]
    )


dash.register_page(__name__, path="/gpu", name="GPU", order=5, title="rlscope · GPU", layout=layout)


def _render(runs: Sequence[LiveRun], steps: int) -> tuple:
    return common.notices(runs), figures.gpu_timeline({r.label: r.gpu_window(steps) for r in runs})


@dash.callback(
    Output("gpu-notices", "children"),
    Output("gpu-timeline", "figure"),
    Output("gpu-seen", "data"),
    Input("app-runs", "value"),
    common.REFRESH,
    Input("gpu-steps", "value"),
    State("gpu-seen", "data"),
)
def _update(values: object, _tick: int | None, steps: object, seen: list | None) -> tuple:
    runs = common.select(values)
    window = steps if steps in _WINDOWS else 3
    key = common.stamp(runs, window)
    if key == seen:
        raise PreventUpdate
    out = common.render_safely(lambda: _render(runs, window), ([], *common.failed(1)))
    return (*out, key)
