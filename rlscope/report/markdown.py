"""The Markdown report (for PR comments, wikis, CI summaries).

Strings from the run are escaped: HTML-special characters become entities and Markdown
punctuation is backslash-escaped, so a data-source name like ``<img onerror=...>`` or
``**x**`` is shown as written, never rendered.
"""

from __future__ import annotations

import re
from typing import Any

from rlscope.analyzers.mfu import cause_label, drawn_causes
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
    tail_unknown_note,
    topology_name,
    what_if_rows,
)

__all__ = ["escape_md", "render_markdown"]

# Data strings never start a line here (they follow a list marker or sit in a table cell),
# so only inline syntax needs escaping: emphasis, code, links and images, tables, strikethrough.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def escape_md(text: Any) -> str:
    """``text`` safe to embed in Markdown (also inside a table cell) as literal text."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return shown(_MD_SPECIAL.sub(r"\\\1", s))  # a line break would end a list item or a table row


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], rule: str) -> list[str]:
    return ["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(escape_md(c) for c in r) + " |" for r in rows]


def render_markdown(doc: dict[str, Any]) -> str:
    """The diagnosis document as a Markdown page."""
    run = doc["run"]
    out = [f"# rlscope diagnose: {escape_md(run['source'])}", ""]
    facts = {
        "framework": run.get("framework"),
        "model": run.get("model"),
        "GPUs": gpus(run),
        "topology": topology_name(run.get("topology") or "") or None,  # as the text report words it
        "split": f"{run['split']['rollout']}:{run['split']['train']}" if run.get("split") else None,
        "steps": step_range(run) or "none timed",
    }
    out += [f"- **{k}**: {escape_md(v)}" for k, v in facts.items() if v is not None]
    out += ["", f"## {HEADLINE_TITLE}", "", "| measure | value |", "|---|---|"]
    out += [f"| {label} | {escape_md(value)} |" for label, value in headline_rows(doc)]

    waterfall = doc["mfu"]["waterfall_points"] or {}
    if waterfall and doc["mfu"]["mfu"] is not None and doc["mfu"]["mfu"] <= 1:  # above 1 a fact is wrong
        out += ["", "## MFU waterfall", "", "| cause | points lost |", "|---|---:|"]
        out += [
            f"| {escape_md(cause_label(k, doc['mfu']['tail_estimated']))} | {waterfall[k]:.1f} |"
            for k in drawn_causes(waterfall)
        ]
        out.append(f"| **MFU** | **{100 * doc['mfu']['mfu']:.1f}** |")
        if doc["mfu"]["tail_unknown"]:
            note = tail_unknown_note(doc["mfu"]["tail_unknown_steps"], doc["mfu"]["tail_points_max"])
            out += ["", escape_md(note)]

    what_if = what_if_rows(doc)
    if what_if:
        out += ["", "## Topology what-if", "", "Speedups are over the step the model gives the current topology.", ""]
        out += _table(WHAT_IF_COLUMNS, what_if, "|---|---|---:|---:|")

    rewards = reward_rows(doc)
    if rewards:
        out += ["", "## Reward by source", "", "Whole run, then the last quarter of it.", ""]
        out += _table(REWARD_COLUMNS, rewards, "|---|---:|---:|---:|---:|---:|---:|")

    findings = doc["findings"]
    out += ["", f"## Findings ({findings_count(doc['counts'])})", ""]
    if not findings:
        out.append("Nothing to report.")
    for f in findings:
        out.append(f"- **{f['severity'].upper()}** {escape_md(f['title'])} ({escape_md(f['id'])})")
        if f["recommendation"]:
            out.append(f"  - {escape_md(f['recommendation'])}")
    if run.get("warnings"):
        out += ["", "## Read with warnings", ""]
        out += [f"- {escape_md(line)}" for line in run["warnings"]]
    return "\n".join(out) + "\n"
