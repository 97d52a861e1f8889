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

# The modules that must work for any integration: they loop over the registry.
SHELL = ("operator/controller.py", "operator/children.py", "operator/trainers.py", "operator/handlers.py", "operator/__main__.py", "operator/permissions.py",
         "operator/kube.py", "operator/crds.py", "operator/core/plan.py", "operator/core/state.py",
         "operator/core/integration.py")


def names() -> set[str]:
    """Every word that names an integration: its registry name and its folder."""
    return {kind.name for kind in REGISTRY} | {kind.__module__.split(".")[2] for kind in REGISTRY}


def test_the_shell_names_no_integration():
    pattern = re.compile("|".join(sorted(names())), re.IGNORECASE)
    found = [f"{path}:{n}: {line.strip()}" for path in SHELL
             for n, line in enumerate((ROOT / "operator" / "disttrain" / path).read_text().splitlines(), 1)
             if pattern.search(line)]
    assert found == [], "loop over integrations/registry.py instead"


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
