"""The Markdown report (for PR comments, wikis, CI summaries).

Strings from the run are escaped: HTML-special characters become entities and Markdown
punctuation is backslash-escaped, so a data-source name like ``<img onerror=...>`` or
``**x**`` is shown as written, never rendered.
"""

from __future__ import annotations

import re
from typing import Any

from rlscope.report._format import gpus, headline_rows, pct, secs

__all__ = ["escape_md", "render_markdown"]

# Data strings never start a line here (they follow a list marker or sit in a table cell),
# so only inline syntax needs escaping: emphasis, code, links and images, tables, strikethrough.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def escape_md(text: Any) -> str:
    """``text`` safe to embed in Markdown (also inside a table cell) as literal text."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    # a line break would end a list item or a table row; an escape byte would drive a terminal
    return "".join(c if c.isprintable() else " " if c in "\r\n\t" else f"\\x{ord(c):02x}" for c in s)


def render_markdown(doc: dict[str, Any]) -> str:
    """The diagnosis document as a Markdown page."""
    run = doc["run"]
    out = [f"# rlscope diagnose: {escape_md(run['source'])}", ""]
    facts = {
        "framework": run.get("framework"),
        "model": run.get("model"),
        "GPUs": gpus(run),
        "topology": run.get("topology"),
        "split": f"{run['split']['rollout']}:{run['split']['train']}" if run.get("split") else None,
        "steps": f"{run['first_step']}..{run['last_step']} ({run['steps']})" if run.get("steps") else "none",
    }
    out += [f"- **{k}**: {escape_md(v)}" for k, v in facts.items() if v is not None]
    out += ["", "## Headline", "", "| measure | value |", "|---|---|"]
    out += [f"| {label} | {escape_md(value)} |" for label, value in headline_rows(doc)]

    waterfall = doc["mfu"]["waterfall_points"] or {}
    if waterfall and doc["mfu"]["mfu"] is not None and doc["mfu"]["mfu"] <= 1:  # above 1 a fact is wrong
        out += ["", "## MFU waterfall", "", "| cause | points lost |", "|---|---:|"]
        out += [f"| {escape_md(k)} | {v:.1f} |" for k, v in waterfall.items() if v is not None]
        out.append(f"| **MFU** | **{100 * doc['mfu']['mfu']:.1f}** |")

    what_if = doc["topology"]["what_if"] or []
    if what_if:
        out += ["", "## Topology what-if", "", "| topology | split | step | speedup |", "|---|---|---:|---:|"]
        for row in what_if:
            split = f"{row['n_rollout']:.0f}:{row['n_train']:.0f}" if row.get("n_rollout") else "all GPUs"
            speed = f"{row['speedup']:.2f}x" if row.get("speedup") else "n/a"
            out.append(f"| {escape_md(row['topology'])} | {split} | {secs(row['step_s'])} | {speed} |")

    rewards = doc.get("rewards")
    if rewards:
        out += ["", "## Reward by source", "", "Whole run, then the last quarter of it.", ""]
        out.append(
            "| source | samples | error rate | zero share | error rate, recent | zero share, recent | mean reward, recent |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for row in rewards["by_source"]:
            mean = "n/a" if row["recent_mean_reward"] is None else f"{row['recent_mean_reward']:.3f}"
            out.append(
                f"| {escape_md(row['source'])} | {row['samples']} | {pct(row['error_rate'], 1)} | "
                f"{pct(row['zero_share'])} | {pct(row['recent_error_rate'], 1)} | {pct(row['recent_zero_share'])} | "
                f"{mean} |"
            )

    findings = doc["findings"]
    out += ["", f"## Findings ({sum(doc['counts'].values())})", ""]
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
