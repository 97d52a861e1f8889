"""Operator settings: read once from the environment; a bad one stops with its variable named."""

from __future__ import annotations

import pytest
from disttrain.operator.settings import Settings


def test_settings_read_once_from_the_environment():
    s = Settings.from_env({"DISTTRAIN_RESYNC_SECONDS": "2", "DISTTRAIN_API_BURST": "7",
                           "DISTTRAIN_OPERATOR_METRICS_PORT": "0"})
    assert (s.resync_seconds, s.api_burst, s.metrics_port) == (2.0, 7, 0)
    assert Settings.from_env({}) == Settings()


@pytest.mark.parametrize("env, says", [({"DISTTRAIN_API_QPS": "fast"}, "DISTTRAIN_API_QPS='fast'"),
                                       ({"DISTTRAIN_API_BURST": "0"}, "DISTTRAIN_API_BURST >= 1")])
def test_bad_settings_stop_with_the_variable_named(env, says):
    with pytest.raises(SystemExit, match=says):
        Settings.from_env(env)


def test_kopf_watches_follow_the_operator_back_off_and_the_api_server_retry_after():
    import kopf
    from disttrain.operator.settings import configure_kopf

    settings = kopf.OperatorSettings()
    configure_kopf(settings, Settings())
    assert list(settings.networking.error_backoffs) == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    # A 429 with Retry-After (the watch cache rebuilt after a CRD update) is tried again
    # when the API server says, not after a back-off already grown to a minute.
    assert settings.networking.enforce_retry_after is True
    assert settings.persistence.finalizer and settings.watching.server_timeout == 300


# ---- the settings table of docs/operations.md against the code and the installs ----------

def documented_settings() -> dict[str, dict[str, str]]:
    """docs/operations.md's environment table: variable -> {default, chart, manifests}."""
    import re

    from .helpers import ROOT

    rows = {}
    for line in (ROOT / "docs" / "operations.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `DISTTRAIN_") and len(cells) == 5:
            name = cells[0].strip("`")
            rows[name] = {k: re.sub(r"^`([^`]*)`.*$", r"\1", v) for k, v in zip(("default", "chart", "manifests"), cells[1:4])}
    return rows


def chart_env() -> dict[str, str]:
    """What the chart's Deployment sets each variable to with its default values."""
    import re

    import yaml

    from .helpers import ROOT

    chart = ROOT / "charts" / "disttrain"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    out = {}
    for name, path in re.findall(r"\{name: (DISTTRAIN_\w+), value: \{\{ \$root\.Values\.([\w.]+) \| quote \}\}\}",
                                 (chart / "templates" / "deployment.yaml").read_text()):
        value = values
        for key in path.split("."):
            value = value[key]
        out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    if values["leaderElection"]["enabled"]:
        out["DISTTRAIN_LEADER_ELECTION"] = "true"  # as --leader-elect
    for name, path, empty in re.findall(r"\{name: (DISTTRAIN_\w+), value: \{\{ \$root\.Values\.([\w.]+) \| join \",\""
                                        r"(?: \| default \"(\w+)\")? \| quote \}\}\}",
                                        (chart / "templates" / "deployment.yaml").read_text()):
        value = values
        for key in path.split("."):
            value = value[key]
        if value or empty:
            out[name] = ",".join(value) or empty
    template = (chart / "templates" / "deployment.yaml").read_text()
    if "{name: DISTTRAIN_TRAINER_IMAGE, value: \"{{ $root.Values.trainerImage.repository }}:" in template:
        app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
        image = values["trainerImage"]
        out["DISTTRAIN_TRAINER_IMAGE"] = f"{image['repository']}:{image['tag'] or app_version}"
    return out


def manifests_env() -> dict[str, str]:
    import yaml

    from .helpers import ROOT

    deployment = yaml.safe_load((ROOT / "manifests" / "operator" / "deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    out = {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}
    if "--leader-elect" in container["args"]:
        out["DISTTRAIN_LEADER_ELECTION"] = "true"
    return out


def test_every_setting_is_documented_with_the_default_the_code_has():
    from dataclasses import fields

    from disttrain.operator.settings import ENV_NAMES

    documented = documented_settings()
    for f in fields(Settings):
        name = ENV_NAMES[f.name]
        assert name in documented, f"{name} is not in docs/operations.md's table"
        value = f.default
        shown = str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)
        if value != "":  # an empty default is described in words
            assert documented[name]["default"] == shown, (name, documented[name]["default"], shown)


@pytest.mark.parametrize("install,read", [("chart", chart_env), ("manifests", manifests_env)])
def test_what_each_install_sets_is_what_the_table_says(install, read):
    """A setting an install sets differs from the program's default on purpose, and the
    table says so (`—`: the install leaves the default)."""
    sets = read()
    for name, row in documented_settings().items():
        expected = sets.get(name, "—")
        assert row[install] == expected, f"{name}: docs/operations.md says {install} {row[install]!r}, it sets {expected!r}"


def test_the_cli_reads_the_trainer_image_from_the_operators_variable():
    """`disttrain render` shows what an operator with the same environment would create."""
    from disttrain.api.defaults import TRAINER_IMAGE_ENV
    from disttrain.operator.settings import ENV_NAMES

    assert ENV_NAMES["trainer_image"] == TRAINER_IMAGE_ENV
