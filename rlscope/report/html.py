"""The HTML report: one self-contained file (plotly.js inlined) that opens offline.

Every string from the run is escaped with ``html.escape`` before it enters the page.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from rlscope.analyzers import Diagnosis
from rlscope.report._format import (
    HEADLINE_TITLE,
    REWARD_COLUMNS,
    WHAT_IF_COLUMNS,
    findings_count,
    gpus,
    headline_rows,
    reward_rows,
    shown,
    step_range,
    topology_name,
    what_if_rows,
)
from rlscope.report.figures import all_figures
from rlscope.trace.reader import RunReader

__all__ = ["render_html"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:.25rem .75rem;border-bottom:1px solid #eee;text-align:left}
.critical{color:#b00020;font-weight:600}.warn{color:#a66a00;font-weight:600}.info{color:#00639b}
.rec{color:#444;margin:.2rem 0 .8rem 1.5rem}.muted{color:#777}
"""


def _e(value: Any) -> str:
    return html.escape(shown(value), quote=True)  # no control characters: a NUL makes the page invalid


def _table(title: str, note: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    if not rows:
        return []
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return [f"<h2>{_e(title)}</h2><p class='muted'>{_e(note)}</p><table><tr>{head}</tr>{body}</table>"]


def render_html(doc: dict[str, Any], d: Diagnosis, reader: RunReader) -> str:
    """The diagnosis as one HTML page with its figures."""
    run = doc["run"]
    rows = [
        ("framework", run.get("framework")),
        ("model", run.get("model")),
        ("GPUs", gpus(run)),
        ("topology", topology_name(run.get("topology") or "") or None),  # as the text report words it
        ("split", f"{run['split']['rollout']}:{run['split']['train']}" if run.get("split") else None),
        ("steps", step_range(run) or "none timed"),
    ]
    headline = headline_rows(doc)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>rlscope diagnose: {_e(run['source'])}</title><style>{_CSS}</style>",
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>",
        f"<h1>rlscope diagnose: {_e(run['source'])}</h1><table>",
        *(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows if v is not None),
        f"<tr><th colspan='2'>{_e(HEADLINE_TITLE)}</th></tr>",
        *(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in headline),
        "</table>",
        *_table(
            "Topology what-if",
            "Speedups are over the step the model gives the current topology.",
            WHAT_IF_COLUMNS,
            what_if_rows(doc),
        ),
        *_table("Reward by source", "Whole run, then its last quarter.", REWARD_COLUMNS, reward_rows(doc)),
        f"<h2>Findings ({findings_count(doc['counts'])})</h2>",
    ]
    if not doc["findings"]:
        parts.append("<p class='muted'>Nothing to report.</p>")
    for f in doc["findings"]:
        sev = f["severity"] if f["severity"] in ("critical", "warn", "info") else "info"
        parts.append(
            f"<div id='{_e(f['id'])}'><span class='{sev}'>{_e(sev.upper())}</span> {_e(f['title'])} "
            f"<span class='muted'>[{_e(f['id'])}]</span></div><div class='rec'>{_e(f['recommendation'])}</div>"
        )
    for title, fig in all_figures(reader, d):
        parts.append(f"<h2>{_e(title)}</h2>")
        parts.append(pio.to_html(fig, include_plotlyjs=False, full_html=False, config={"displaylogo": False}))
    # last: the figures read tables again, and what did not read then is said too
    warnings = list(run.get("warnings") or [])
    warnings += [w for w in reader.warnings if w not in warnings]
    if warnings:
        parts.append("<h2>Read with warnings</h2><ul>")
        parts += [f"<li>{_e(line)}</li>" for line in warnings]
        parts.append("</ul>")
    parts.append(f"<p class='muted'>rlscope {_e(doc['rlscope_version'])}, schema {_e(doc['schema'])}</p></body></html>")
    return "\n".join(parts)
