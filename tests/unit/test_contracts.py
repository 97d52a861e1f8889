"""The contract inventory (tests/contracts.yaml) is complete and true: every documented field,
flag, exit code, client method, metric, `/status` key and chart value has a row, is named in
the docs, and has tests that use it (tests/unit/contracts.py says how a row is made)."""

from __future__ import annotations

import yaml

from . import contracts as c


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
    untested = sorted(f"{kind} {id_}" for kind, table in committed().items() for id_, row in table.items()
                      if not row["tests"])
    assert untested == [], "write a test that uses each, then run `make contracts`"


def test_the_inventory_reaches_every_kind_it_promises():
    rows = committed()
    assert list(rows) == list(c.KINDS) and all(rows[kind] for kind in c.KINDS)


def test_values_that_render_differently_when_namespaced_get_a_row_of_their_own():
    """What the RoleBindings name (the account, the fullname) and what the namespaced mode
    refuses (kueue) depend on watchNamespaces; the image does not."""
    by_mode = c.values_by_install_mode()
    assert {"serviceAccount.name", "serviceAccount.create", "fullnameOverride", "nameOverride", "rbac.create",
            "kueue.enabled"} <= set(by_mode)
    assert not {"image.tag", "resources.limits.memory", "watchNamespaces"} & set(by_mode)
    assert set(committed()["chart-value"]) >= {f"{v} [namespaced]" for v in by_mode}


def test_an_exit_code_row_needs_a_run_of_its_command_compared_with_that_code():
    """Claimed by how a test runs the command and checks its code, not by the digits alone."""
    wait_124 = next(x for x in c.exit_codes() if x.id == "wait 124")
    held = c.TestSource("t", "t", 'late = cli(cluster, "wait", "j", "--timeout", "2s")\n'
                                  'assert (late.returncode, late.stderr) == (\n    124, "")')
    inline = c.TestSource("t", "t", 'assert cli(cluster, "wait", "j").returncode == 124')
    other = c.TestSource("t", "t", 'out = cli(cluster, "wait", "j")\nassert out.returncode == 1\n'
                                   'late = cli(cluster, "get", "j")\nassert late.returncode == 124')
    digits = c.TestSource("t", "t", '"wait"\nsleep(124)\nassert rc == 0')
    assert [c.exercises(wait_124, t) for t in (held, inline, other, digits)] == [True, True, False, False]
