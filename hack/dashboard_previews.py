"""Render the shipped Grafana dashboards' panels to PNG from recorded query results.

No Grafana server can run here, so `make dashboard-previews` records every panel's range
query against live data (tests/cluster/reconcile/test_dashboards.py with
DISTTRAIN_DASHBOARD_DATA=FILE) and this script draws them: one PNG per dashboard, a grid
of panels with their titles, legends and units.

    python hack/dashboard_previews.py RESULTS.json OUT_DIR

`render_dashboard` is pure (recorded results -> matplotlib Figure); only `main` touches files.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only

from matplotlib.figure import Figure  # noqa: E402

# Grafana unit ids used by our dashboards -> axis labels ("short" is a plain number).
UNITS = {"s": "seconds", "short": "", "percent": "%", "bytes": "bytes"}
COLUMNS = 2
_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat: `{{label}}` replaced by the series' label (empty if absent);
    without a template, the label set as PromQL writes it."""
    if template:
        return _TEMPLATE.sub(lambda m: labels.get(m.group(1), ""), template)
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}"


def points(values: list[list[Any]], start: float) -> tuple[list[float], list[float]]:
    """Prometheus [[time, "value"], ...] -> (seconds since start, finite values)."""
    xs, ys = [], []
    for stamp, raw in values:
        value = float(raw)
        if math.isfinite(value):
            xs.append(float(stamp) - start)
            ys.append(value)
    return xs, ys


def render_dashboard(dashboard: dict[str, Any], start: float) -> Figure:
    """One figure: a grid of the dashboard's panels, each a line per returned series."""
    panels = dashboard["panels"]
    rows = max(1, math.ceil(len(panels) / COLUMNS))
    figure = Figure(figsize=(6 * COLUMNS, 2.8 * rows), layout="constrained")
    figure.suptitle(f"{dashboard['title']} (preview from live data)", fontsize=13)
    axes = figure.subplots(rows, COLUMNS, squeeze=False).ravel()
    for ax, panel in zip(axes, panels):
        ax.set_title(panel["title"], fontsize=10, loc="left")
        unit = UNITS.get(panel.get("unit", ""), panel.get("unit", ""))
        if unit:
            ax.set_ylabel(unit)
        ax.set_xlabel("seconds into the run", fontsize=8)
        lines = 0
        for target in panel["targets"]:
            for series in target.get("series", []):
                xs, ys = points(series["values"], start)
                if xs:
                    ax.plot(xs, ys, marker="." if len(xs) < 3 else None,
                            label=legend(target.get("legend", ""), series["metric"]))
                    lines += 1
        if lines:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return figure


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python hack/dashboard_previews.py RESULTS.json OUT_DIR", file=sys.stderr)
        return 2
    results, out_dir = json.loads(Path(argv[0]).read_text()), Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    for dashboard in results["dashboards"]:
        target = out_dir / f"dashboard-{Path(dashboard['file']).stem}.png"
        render_dashboard(dashboard, results["start"]).savefig(target, dpi=80)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
