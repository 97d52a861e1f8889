"""`--template FILE` of `disttrain validate` and `disttrain render`: a TrainingTemplate or
ClusterTrainingTemplate read from a file, each job resolved against it offline as the
operator resolves it (api/template_resolution.py), and where each setting came from."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from disttrain.api.errors import FieldError
from disttrain.api.template_resolution import RESOLUTION_ORDER, TEMPLATE_KINDS, Template, check_template, parse_template
from disttrain.client.documents import DocumentError, describe, load_documents


def load_template(path: str) -> Template:
    """The one template in a file, checked as the operator checks it; DocumentError names
    the file, the line and every problem."""
    documents = load_documents(path)
    found = [d for d in documents if isinstance(d.data, dict) and d.data.get("kind") in TEMPLATE_KINDS]
    if len(found) != 1:
        kinds = ", ".join(describe(d.data) for d in documents) or "nothing"
        raise DocumentError(f"{path}:1: --template takes a file with one {' or '.join(TEMPLATE_KINDS)} "
                            f"(this one holds {kinds})")
    doc = found[0]
    template, errors = parse_template(doc.data)
    if template is not None:
        errors = check_template(template)
    if errors:
        lines = "\n".join(f"  {doc.path}:{doc.line_of(e.path) or doc.line}: error: {e}" for e in errors)
        raise DocumentError(f"{doc.label}: the template is invalid:\n{lines}")
    assert template is not None
    return template


def resolved_document(template: Template | None, data: dict[str, Any]) -> tuple[dict[str, Any], list[FieldError],
                                                                                 dict[str, Any] | None]:
    """(the job's document resolved against the template, the enforced settings it
    contradicts, the report's `template` entry); the document as it is without one."""
    if template is None:
        return data, [], None
    from disttrain.api.template_resolution import resolve

    resolution = resolve(template, data)
    entry = {"kind": template.kind, "name": template.name, "order": RESOLUTION_ORDER,
             "sources": resolution.sources}
    return resolution.doc, resolution.errors, entry


def print_sources(entry: dict[str, Any], out: TextIO = sys.stdout) -> None:
    """Where each setting of a resolved job came from, one line each."""
    print(f"  template: {entry['kind']} {entry['name']} ({entry['order']})", file=out)
    width = max((len(path) for path in entry["sources"]), default=0)
    for path, source in entry["sources"].items():
        print(f"    {path:<{width}}  {source}", file=out)
