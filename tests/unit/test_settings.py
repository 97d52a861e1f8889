"""Operator settings: read once from the environment; a bad one stops with its variable named."""

from __future__ import annotations

import pytest
from disttrain_operator.settings import Settings


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
