"""The terminal report: headline numbers, the MFU waterfall as bars, findings by severity.

Every string that came from the run (source names, metric keys, titles built from them)
is printed as plain text: rich markup in data is never interpreted.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

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

__all__ = ["render_text"]

_STYLE = {"critical": "bold red", "warn": "yellow", "info": "cyan"}


def _plain(*parts: tuple[str, str] | str) -> Text:
    """Text from (string, style) pieces; strings are never parsed as markup, and their control
    characters are written out (:func:`shown`)."""
    text = Text()
    for part in parts:
        if isinstance(part, tuple):
            text.append(shown(part[0]), style=part[1])
        else:
            text.append(shown(part))
    return text


def _table(console: Console, title: str, note: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    if not rows:
        return
    console.print()
    console.print(_plain((title, "bold underline"), note))
    table = Table(box=None, padding=(0, 2), show_edge=False)
    for i, name in enumerate(header):
        table.add_column(Text(name), justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(_plain(cell) for cell in row))  # source names are data, not markup
    console.print(table)


def render_text(doc: dict[str, Any], console: Console) -> None:
    """Print the diagnosis document to ``console``."""
    run = doc["run"]
    console.print(_plain(("rlscope diagnose: ", "bold"), (str(run["source"]), "bold")))
    facts = [
        run.get("framework"),
        run.get("model"),
        gpus(run),
        topology_name(run.get("topology", ""))
        + (f" {run['split']['rollout']}:{run['split']['train']}" if run.get("split") else ""),
        # steps are timed steps (run.steps): an untimed step line is no step the analyzers can use
        f"steps {step_range(run)}" if run.get("steps") else "no timed steps",
    ]
    console.print(_plain("  " + " | ".join(str(f) for f in facts if f)))
    console.print()

    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()

    for label, value in headline_rows(doc):
        table.add_row(_plain(label), _plain(value))  # "[estimated]" and data are not markup
    console.print(_plain((HEADLINE_TITLE, "bold underline")))
    console.print(table)

    waterfall = doc["mfu"]["waterfall_points"] or {}
    if waterfall and doc["mfu"]["mfu"] is not None and doc["mfu"]["mfu"] <= 1:  # above 1 a fact is wrong
        console.print()
        console.print(_plain(("MFU waterfall", "bold underline"), " (points of 100% peak FLOP/s lost, by cause)"))
        rows = [(cause_label(k, doc["mfu"]["tail_estimated"]), waterfall[k]) for k in drawn_causes(waterfall)]
        rows.append(("= MFU", 100 * doc["mfu"]["mfu"]))
        width = max(len(label) for label, _ in rows)
        for label, points in rows:
            bar = "█" * round(points / 2) if points >= 1 else ("▏" if points > 0 else "")
            style = "green" if label == "= MFU" else "magenta"
            console.print(_plain(f"  {label:<{width}}  ", (bar, style), f" {points:.1f}"))
        if doc["mfu"]["tail_unknown"]:
            note = tail_unknown_note(doc["mfu"]["tail_unknown_steps"], doc["mfu"]["tail_points_max"])
            console.print(_plain("  " + note))

    _table(
        console, "Topology what-if", " (speedups over the step modelled for now)", WHAT_IF_COLUMNS, what_if_rows(doc)
    )
    _table(console, "Reward by source", " (whole run, then its last quarter)", REWARD_COLUMNS, reward_rows(doc))

    findings = doc["findings"]
    counts = doc["counts"]
    console.print()
    console.print(_plain(("Findings", "bold underline"), f" ({findings_count(counts)})"))
    if not findings:
        console.print("  nothing to report")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=10, no_wrap=True)
    grid.add_column()
    for f in findings:
        sev = f["severity"]
        body = _plain((f["title"], "bold"), f"  [{f['id']}]")
        if f["recommendation"]:
            body.append("\n-> " + shown(f["recommendation"]))
        grid.add_row(_plain("  ", (sev.upper(), _STYLE.get(sev, ""))), body)
    console.print(grid)
    if run.get("warnings"):
        console.print()
        console.print(_plain(("Read with warnings", "bold underline")))
        for line in run["warnings"]:
            console.print(_plain("  ", ("!", "yellow"), " " + line), soft_wrap=True)  # paths stay whole
