"""The dashboard app: Dash Pages over live views of the run directories given on the command line.

``create_app(run_dirs)`` builds the app; ``rlscope dashboard`` serves it. The header holds
the page links, the run selector (one run, or several to overlay) and the refresh tick
(``dcc.Interval``). The pages hear a tick only while none of the renders it drives is in
flight (the page itself tracks their requests, ``_TRACK_RENDERS``): asked again while one
runs, Dash drops its answer for the newer request, so renders slower than the tick would
never be shown. Runs are chosen by their index in the fixed list given here, so nothing a
browser sends can name another path. The pages' callbacks are global (Dash Pages'
``dash.callback``) and bind to the first app that serves a request, so a process builds one app.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Sequence

import dash
from dash import Input, Output, dcc, html

from rlscope.dashboards.live import WINDOW_STEPS, LiveRuns

__all__ = ["create_app"]

STUCK_TICKS = 20
"""Ticks after which a render's unanswered request is taken as lost: the refresh passes at that tick,
held back at the ones before it."""

_TRACK_RENDERS = """
// rlscope: the requests of the renders the refresh drives (those with REFRESH among their inputs)
// that are in flight, each with the ticks it has held back; see dashboards/app.py
(() => {
    const renders = window.__rlscope_renders = new Map();
    const send = window.fetch;
    const drivenByRefresh = (resource, init) => {
        if (!String(resource).includes("_dash-update-component") || typeof (init && init.body) !== "string") {
            return false;
        }
        try {
            const inputs = JSON.parse(init.body).inputs || [];
            return inputs.some((i) => i && i.id === REFRESH_ID && i.property === REFRESH_PROPERTY);
        } catch (e) {
            return false;
        }
    };
    window.fetch = (resource, init) => {
        const answer = send(resource, init);
        if (drivenByRefresh(resource, init)) {
            const render = {};
            const done = () => renders.delete(render);
            renders.set(render, 0);
            // done once the whole answer is in, not at its headers: Dash reads the body then, and a
            // render asked for before that would be dropped for it
            answer.then((response) => response.clone().arrayBuffer()).then(done, done);
        }
        return answer;
    };
})();
"""

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #222; background: #fafafa; }
.rls-header { display: flex; flex-wrap: wrap; align-items: center; gap: 14px; padding: 8px 16px; background: #1f2937; color: white; }
.rls-brand { font-weight: 700; font-size: 18px; margin-right: 8px; }
.rls-nav a { color: #cbd5e1; margin-right: 12px; text-decoration: none; }
.rls-nav a:hover { color: white; text-decoration: underline; }
.rls-runs { min-width: 320px; flex: 1; color: #222; }
.rls-status { font-size: 12px; color: #cbd5e1; }
.rls-page { padding: 8px 16px 32px; }
.rls-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 8px; }
.rls-cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.rls-card { background: white; border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px 12px; min-width: 96px; }
.rls-card-name { font-size: 11px; color: #6b7280; text-transform: uppercase; letter-spacing: 0.04em; }
.rls-card-value { font-size: 17px; font-weight: 600; }
.rls-notice { background: #fff7ed; border: 1px solid #fed7aa; padding: 6px 10px; margin: 6px 0; border-radius: 4px; }
.rls-muted { color: #6b7280; font-size: 13px; }
.rls-badge { font-size: 11px; padding: 1px 6px; border-radius: 3px; margin-right: 6px; }
.rls-control { display: flex; align-items: center; gap: 8px; margin: 8px 0; }
.rls-button { margin: 8px 0; padding: 4px 12px; }
"""

_created = False


def _header(runs: LiveRuns) -> html.Div:
    links = [dcc.Link(page["name"], href=page["relative_path"]) for page in dash.page_registry.values()]
    options = [{"label": run.label, "value": run.index} for run in runs.runs]
    return html.Div(
        [
            html.Span("rlscope", className="rls-brand"),
            html.Nav(links, className="rls-nav"),
            dcc.Dropdown(id="app-runs", options=options, value=[0], multi=True, clearable=False, className="rls-runs"),
            html.Span(id="app-status", className="rls-status"),
        ],
        className="rls-header",
    )


def _runs_from_url(search: str | None, count: int) -> list[int]:
    """``?runs=0,2`` preselects runs by index; anything else in the query is ignored."""
    query = urllib.parse.parse_qs((search or "").lstrip("?"))
    values = [v for item in query.get("runs", []) for v in item.split(",")]
    picked = [int(v) for v in values if v.isdigit() and int(v) < count]
    if not picked:
        raise dash.exceptions.PreventUpdate
    return picked


def create_app(
    run_dirs: Sequence[str | os.PathLike[str]], *, refresh_s: float = 5.0, window: int = WINDOW_STEPS
) -> dash.Dash:
    """The dashboard over ``run_dirs`` (shown in this order), refreshing every ``refresh_s`` seconds (0: never).

    ``window`` is how many recent steps keep their raw rows and are analysed live.
    """
    global _created
    if _created:
        raise RuntimeError("one dashboard app per process: Dash Pages' global callbacks bind to the first app")
    if not run_dirs:
        raise ValueError("the dashboard needs at least one run directory")
    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder="",
        include_assets_files=False,
        suppress_callback_exceptions=True,
        title="rlscope",
        update_title=None,
    )
    _created = True
    # importing a page registers it (dash.register_page needs the app to exist)
    from rlscope.dashboards.pages import _common, advice, async_, gpu, mismatch, overview, rewards, rollout  # noqa: F401

    runs = LiveRuns(run_dirs, window)
    app.server.config[_common.RUNS_KEY] = runs
    tracker = _TRACK_RENDERS.replace("REFRESH_ID", json.dumps(_common.REFRESH.component_id)).replace(
        "REFRESH_PROPERTY", json.dumps(_common.REFRESH.component_property)
    )
    app.index_string = app.index_string.replace(
        "{%css%}", "{%css%}\n        <style>" + _CSS + "</style>\n        <script>" + tracker + "</script>"
    )
    app.layout = html.Div(
        [
            dcc.Location(id="app-url"),
            _header(runs),
            html.Div(dash.page_container, className="rls-page"),
            dcc.Interval(id="app-tick", interval=max(refresh_s, 0.5) * 1000, disabled=refresh_s <= 0),
            dcc.Store(id="app-refresh"),
        ]
    )
    # The tick passes once no render it drives is in flight. A request leaves the tracker when its
    # whole answer has arrived or its connection fails (a restarted server, a closed tunnel), so a lost answer
    # costs nothing; one unanswered for STUCK_TICKS ticks (a tunnel that drops packets) is taken as
    # lost too, so it holds the refresh back once, that long, and not until the page is reloaded.
    app.clientside_callback(
        f"""(tick) => {{
            const renders = window.__rlscope_renders;
            for (const [render, held] of renders) {{
                if (held + 1 >= {STUCK_TICKS}) renders.delete(render);
                else renders.set(render, held + 1);
            }}
            return renders.size > 0 ? window.dash_clientside.no_update : tick;
        }}""",
        Output("app-refresh", "data"),
        Input("app-tick", "n_intervals"),
        prevent_initial_call=True,
    )
    app.callback(Output("app-runs", "value"), Input("app-url", "search"))(
        lambda search: _runs_from_url(search, len(runs))
    )

    @app.callback(Output("app-status", "children"), Input("app-runs", "value"), _common.REFRESH)
    def _status(values: object, _tick: int | None) -> str:
        parts = []
        for run in _common.select(values):
            parts.append(f"{run.label}: " + (run.problem or f"step {run.last_step}"))
        return " · ".join(parts)

    return app
