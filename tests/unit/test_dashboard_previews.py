"""hack/dashboard_previews.py: recorded query results -> one figure of panels (pure)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dashboard_previews", ROOT / "hack" / "dashboard_previews.py")
previews = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(previews)


def series(labels: dict, *values: float, start: float = 1000.0) -> dict:
    return {"metric": labels, "values": [[start + i, str(v)] for i, v in enumerate(values)]}


DASHBOARD = {"title": "disttrain / test", "panels": [
    {"title": "Loss", "unit": "short", "targets": [
        {"expr": "x", "legend": "{{namespace}}/{{job}}",
         "series": [series({"namespace": "ml", "job": "a"}, 3, 2, 1), series({"namespace": "ml", "job": "b"}, 4, 3)]}]},
    {"title": "Step time", "unit": "s", "targets": [
        {"expr": "y", "legend": "p50", "series": [series({}, 0.1, float("nan"), 0.2)]},
        {"expr": "z", "legend": "p99", "series": [series({}, 0.3)]}]},
    {"title": "Nothing yet", "unit": "short", "targets": [{"expr": "w", "legend": "", "series": []}]},
]}


def test_one_axis_per_panel_with_title_unit_and_a_line_per_series():
    figure = previews.render_dashboard(DASHBOARD, start=1000.0)
    axes = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title(loc="left") for ax in axes] == ["Loss", "Step time", "Nothing yet"]
    assert [ax.get_ylabel() for ax in axes] == ["", "seconds", ""]
    loss, step_time, nothing = axes
    assert [line.get_label() for line in loss.get_lines()] == ["ml/a", "ml/b"]
    assert list(loss.get_lines()[0].get_xdata()) == [0.0, 1.0, 2.0]  # seconds since the run's start
    assert [line.get_label() for line in step_time.get_lines()] == ["p50", "p99"]
    assert list(step_time.get_lines()[0].get_ydata()) == [0.1, 0.2]  # NaN (no rate yet) is left out
    assert not nothing.get_lines() and nothing.texts[0].get_text() == "no data"
    # 3 panels on a 2-column grid: the fourth cell is hidden, not an empty frame.
    assert len(figure.axes) == 4 and not figure.axes[3].get_visible()
    assert "disttrain / test" in figure._suptitle.get_text()


@pytest.mark.parametrize(("template", "labels", "expected"), [
    ("{{phase}}", {"phase": "Running"}, "Running"),
    ("age {{ namespace }}/{{job}}", {"namespace": "ml", "job": "a"}, "age ml/a"),
    ("{{missing}}x", {}, "x"),
    ("", {"__name__": "m", "b": "2", "a": "1"}, '{a="1", b="2"}'),
])
def test_legend_follows_grafana_legend_format(template, labels, expected):
    assert previews.legend(template, labels) == expected


def test_main_writes_one_png_per_dashboard(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"start": 1000.0, "end": 1003.0,
                                   "dashboards": [{**DASHBOARD, "file": "operator.json"},
                                                  {**DASHBOARD, "file": "training.json"}]}))
    assert previews.main([str(results), str(tmp_path / "img")]) == 0
    written = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert written == ["dashboard-operator.png", "dashboard-training.png"]
    assert (tmp_path / "img" / "dashboard-operator.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert previews.main([]) == 2 and "usage" in capsys.readouterr().err
