"""The contract inventory (tests/contracts.yaml) is complete and true: every documented field,
flag, exit code, client method, metric, `/status` key and chart value has a row, is named in
the docs, and has tests that use it (tests/unit/contracts.py says how a row is made)."""

from __future__ import annotations

import yaml

from . import contracts as c

# Contracts no test used when the inventory was first made (issue 29). This list only
# shrinks: a contract added since needs its test with it.
WITHOUT_A_TEST_WHEN_INVENTORIED: frozenset[str] = frozenset({
    "chart-value dashboards.labels.grafana_dashboard",
    "chart-value podMonitor.labels",
    "chart-value prometheusRule.checkpointMaxAgeMinutes",
    "chart-value prometheusRule.stallMinutes",
    "chart-value restartBackoffMaxSeconds",
    "chart-value restartBackoffSeconds",
    "chart-value serviceMonitor.labels",
    "client-method Client.events",
    "client-method Client.jobs",
    "client-method Client.logs",
    "client-method Client.status",
    "client-method Client.watch_all",
    "flag run --checkpoint-uri",
    "flag sweep --namespace",
    "flag sweep --storage",
    "metric disttrain_checkpoint_last_timestamp_seconds",
    "metric disttrain_checkpoint_save_seconds",
    "metric disttrain_job_goodput_ratio",
    "metric disttrain_job_lost_seconds_total",
    "metric disttrain_train_eval_loss",
    "metric disttrain_train_step_seconds",
    "status-report evalHistory",
    "status-report stepSeconds",
    "status-report tokensPerSecond",
})


def committed() -> dict[str, dict[str, dict]]:
    return yaml.safe_load(c.INVENTORY.read_text())


def by_key() -> dict[tuple[str, str], c.Contract]:
    return {(x.kind, x.id): x for x in c.contracts()}


def test_every_contract_has_a_row_and_every_row_is_a_contract():
    rows = {(kind, id_) for kind, table in committed().items() for id_ in table}
    missing, stale = sorted(set(by_key()) - rows), sorted(rows - set(by_key()))
    assert (missing, stale) == ([], []), "run `make contracts`, then write a test for each new row"


def test_every_contract_is_documented_where_its_row_says():
    contracts = by_key()
    wrong = {f"{kind} {id_}": (row["doc"], c.doc_of(contracts[kind, id_]))
             for kind, table in committed().items() for id_, row in table.items()
             if (kind, id_) in contracts and row["doc"] != c.doc_of(contracts[kind, id_])}
    assert wrong == {}, "(row says, docs say): document it, or run `make contracts` if it moved"


def test_every_test_a_row_names_exists_and_uses_that_contract():
    contracts, tests = by_key(), {t.id: t for t in c.test_sources()}
    gone, unused = [], []
    for kind, table in committed().items():
        for id_, row in table.items():
            for test in row["tests"]:
                if test not in tests:
                    gone.append(f"{kind} {id_}: {test}")
                elif (kind, id_) in contracts and not c.exercises(contracts[kind, id_], tests[test]):
                    unused.append(f"{kind} {id_}: {test}")
    assert (gone, unused) == ([], []), "run `make contracts`"


def test_every_contract_has_a_test():
    untested = {f"{kind} {id_}" for kind, table in committed().items() for id_, row in table.items()
                if not row["tests"]}
    assert sorted(untested - WITHOUT_A_TEST_WHEN_INVENTORIED) == [], "write a test that uses each"
    contracts = by_key()
    now_tested = sorted(key for key in WITHOUT_A_TEST_WHEN_INVENTORIED
                        if c.tests_of(contracts[tuple(key.split(" ", 1))]))  # type: ignore[index]
    assert now_tested == [], "tested now: run `make contracts` and take them off the list"


def test_the_inventory_reaches_every_kind_it_promises():
    rows = committed()
    assert list(rows) == list(c.KINDS) and all(rows[kind] for kind in c.KINDS)
