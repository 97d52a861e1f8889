"""The integration seam (integrations/protocol.py, registry.py): the shell knows the
protocol and the registry, never an integration by name; each integration's parts say
whose they are; what an integration declares reaches the shell's tables."""

from __future__ import annotations

import re

from disttrain.integrations.protocol import Integration
from disttrain.integrations.registry import REGISTRY, integrations
from disttrain.operator import kube, permissions
from disttrain.operator.core.integration import Joined, Step
from disttrain.operator.handlers import needed_crds
from disttrain.operator.settings import Settings

from .helpers import ROOT

PACKAGE = ROOT / "operator" / "disttrain"
# Every module outside integrations/ works for any integration (it loops over the registry),
# but these, which name one for a reason of their own:
MAY_NAME = {
    # The API model is the one schema source of the CRD: its fields, condition types and
    # their descriptions say what a job asks of an integration and what it reports
    # (spec.scheduling.gang, Kueue's Queued/Admitted/Evicted and its failure causes).
    "api/types.py": "the CRD's spec and its descriptions, which say what a job asks of an integration",
    "api/placement.py": "the CRD's spec.scheduling (gang, topology), devices and computeDomain, and their descriptions",
    "api/status_types.py": "the CRD's status descriptions (admission, Kueue's causes and conditions)",
    "api/conditions.py": "the CRD's condition types Kueue's admission sets, and its reasons (Events share them)",
    "api/validate.py": "the offline check of the API's own spec.scheduling.gang (disttrain validate)",
    # Leaves the API's spec.scheduling.gang out of the template hash while unset.
    "render/pod.py": "the template hash of the API's spec.scheduling.gang",
    # The words `disttrain get`/`describe` print for the Queued condition.
    "client/jobview.py": "the user's words for the API's Queued condition",
}


def outside_integrations() -> list[str]:
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if path.relative_to(PACKAGE).parts[0] != "integrations")


def names() -> set[str]:
    """Every word that names an integration: its registry name and its folder."""
    return {kind.name for kind in REGISTRY} | {kind.__module__.split(".")[2] for kind in REGISTRY}


def test_nothing_outside_integrations_names_one():
    pattern = re.compile("|".join(sorted(names())), re.IGNORECASE)
    found = [f"{path}:{n}: {line.strip()}" for path in outside_integrations() if path not in MAY_NAME
             for n, line in enumerate((PACKAGE / path).read_text().splitlines(), 1)
             if pattern.search(line)]
    assert found == [], "loop over integrations/registry.py instead"


def test_each_module_that_may_name_an_integration_does():
    """An exception no longer needed goes from MAY_NAME."""
    pattern = re.compile("|".join(sorted(names())), re.IGNORECASE)
    assert set(MAY_NAME) <= set(outside_integrations())
    assert [path for path in MAY_NAME if not pattern.search((PACKAGE / path).read_text())] == []


def test_each_integration_is_one_registry_line_with_a_name_of_its_own():
    assert all(issubclass(kind, Integration) for kind in REGISTRY)
    assert len({kind.name for kind in REGISTRY}) == len(REGISTRY) and all(kind.name for kind in REGISTRY)
    assert [type(i) for i in integrations(Settings())] == list(REGISTRY)


def subclasses(base: type) -> list[type]:
    found, todo = [], [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def test_every_part_and_step_says_which_integration_it_belongs_to():
    registered = {kind.name for kind in REGISTRY}
    parts = [sub for sub in subclasses(Joined) if sub.__module__.startswith("disttrain.integrations.")]
    steps = [sub for sub in subclasses(Step) if sub.__module__.startswith("disttrain.integrations.")]
    assert parts and steps
    assert {sub.integration for sub in parts + steps} <= registered


def test_what_an_integration_declares_reaches_the_permissions_paths_and_crds():
    for kind in REGISTRY:
        for use in kind.uses:
            assert any((u.group, u.resource, u.feature) == (use.group, use.resource, kind.feature)
                       and u.verbs == frozenset(use.verbs.split()) for u in permissions.USES), use
            assert use.scope in (permissions.WATCHED, permissions.OWN, permissions.CLUSTER), use
        for name, path in kind.paths.items():
            assert kube._PATHS[name] == path
    off, on = integrations(Settings()), integrations(Settings(kueue=True))
    watched = {crd.name for kind in REGISTRY for crd in kind.crds}
    assert watched and not watched & {name for name, *_ in needed_crds(off)}
    assert watched <= {name for name, *_ in needed_crds(on)} == {name for name, *_ in needed_crds()}


def test_an_integration_declares_its_settings_and_its_failure_causes():
    """Its settings are fields of Settings (read from DISTTRAIN_<NAME>); the causes only it
    records are of the API's list, and the core does not name them."""
    from dataclasses import fields
    from typing import get_args

    from disttrain.api.status_types import FailureCause
    from disttrain.operator.core import failures

    declared = {s.name: s.default for kind in REGISTRY for s in kind.settings}
    assert declared and {f.name: f.default for f in fields(Settings) if f.name in declared} == declared
    causes = [cause for kind in REGISTRY for cause in kind.causes]
    core = {value for name, value in vars(failures).items() if name.isupper() and isinstance(value, str)}
    assert causes and set(causes) <= set(get_args(FailureCause)) and not set(causes) & core


# What an integration may use of the pure core: the hooks (integration.py), a pass's data
# (state.py, pods.py) and the stops (stopping.py: stop_first, settle_stop, gone).
SEAM = {"disttrain.operator.core.integration", "disttrain.operator.core.state", "disttrain.operator.core.pods",
        "disttrain.operator.core.stopping"}


def test_an_integration_reaches_the_core_only_through_its_seam():
    import ast

    reached = {}
    for path in (PACKAGE / "integrations").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("disttrain.operator.core"):
                reached[node.module] = str(path.relative_to(PACKAGE))
    assert set(reached) <= SEAM, {m: p for m, p in reached.items() if m not in SEAM}
