"""The training templates jobs are resolved against (api/template_resolution.py), for the shell:
kopf indexes both kinds (handlers.py); a job's pass takes the template it keeps
(status.template) or the live one it names; a template that comes, changes or goes queues
the jobs that name it, and its deletion is told on each job that keeps it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from disttrain.api import conditions as c
from disttrain.api.errors import FieldError
from disttrain.api.status_types import DistributedTrainingStatus as Status
from disttrain.api.status_types import TemplateStatus
from disttrain.api.template_resolution import (CLUSTER_TEMPLATE_KIND, NAMESPACE_DEFAULT, TEMPLATE_KIND, Template,
                                               choose, parse_template, snapshot)

if TYPE_CHECKING:
    from disttrain.operator.controller import Controller, WatchedJob

Key = tuple[str, str]
# A template as indexed: the parsed template, or why it cannot be used.
Indexed = Template | tuple[FieldError, ...]


def summarize(body: Mapping[str, Any]) -> Indexed:
    template, errors = parse_template(dict(body))
    return template if template is not None else tuple(errors)


class Templates:
    """The controller's (`shell`) view of the templates."""

    def __init__(self, shell: Controller):
        self.shell = shell
        self.indexes: dict[str, Any] = {}  # kind -> kopf's index of (namespace, name) -> Indexed

    def live(self, kind: str, namespace: str | None, name: str) -> Indexed | None:
        index = self.indexes.get(kind)
        try:
            found = list(index.get((namespace, name), [])) if index is not None else []
        except (KeyError, TypeError):
            return None
        return found[-1] if found else None

    def choose(self, view: WatchedJob, key: Key, status: Status) -> tuple[Template | None, FieldError | None]:
        """The template the job is resolved against now (api/templates.choose), or why it
        cannot be. A job that already ran without one takes none: a namespace default
        made later is for new jobs."""
        ref = view.spec.get("templateRef")
        if not ref and status.template is None and status.resolved is not None:
            return None, None
        broken: list[FieldError] = []

        def usable(kind: str, namespace: str | None, name: str) -> Template | None:
            found = self.live(kind, namespace, name)
            if isinstance(found, tuple):
                broken.extend(found)
                return None
            return found

        template, missing = choose(ref, key[0], status.template, usable)
        if broken:
            kind = ((ref or {}).get("kind") or CLUSTER_TEMPLATE_KIND) if ref else TEMPLATE_KIND
            name = (ref or {}).get("name") or NAMESPACE_DEFAULT
            return None, FieldError("spec.templateRef", {"kind": kind, "name": name}, "names a template that is "
                                    "itself invalid: " + "; ".join(str(e) for e in broken),
                                    "a valid template", "ask your platform team to fix the template "
                                    "(disttrain validate --template shows why)")
        return template, missing

    def kept(self, template: Template | None, status: Status, now: str) -> TemplateStatus | None:
        """What the job keeps of the template it was resolved against."""
        if template is None:
            return None
        before = status.template
        if before is not None and (before.kind, before.name, before.uid) == (template.kind, template.name, template.uid):
            return before
        return snapshot(template, now)

    def event(self, kind: str, namespace: str | None, name: str, deleted: bool, uid: str | None) -> None:
        """Queue the jobs that name the template (or, for a namespace's `default`, the jobs
        of that namespace that name none); when it was deleted, say so on each job that
        keeps it."""
        shell = self.shell
        for key, view in list(shell.jobs.items()):
            ref = view.spec.get("templateRef") or {}
            named = ((ref.get("kind") or CLUSTER_TEMPLATE_KIND, ref.get("name")) == (kind, name) if ref.get("name")
                     else kind == TEMPLATE_KIND and name == NAMESPACE_DEFAULT)
            if not named or (kind == TEMPLATE_KIND and key[0] != namespace):
                continue
            shell.queue.add(key)
            kept = ((view.status or {}).get("template") or {})
            if deleted and uid and kept.get("uid") == uid:
                shell.tell(key, view, "Normal", c.TEMPLATE_DELETED,
                           f"{kind} {name} was deleted; this job keeps what it was resolved against (generation "
                           f"{kept.get('generation')}, status.template), a new job naming it is refused")
