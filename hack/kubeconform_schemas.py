"""JSON schemas for kubeconform, from a running API server's OpenAPI v3 (CRDs included).

    python hack/kubeconform_schemas.py OUT_DIR        # reads the server of $KUBECONFIG via kubectl
    kubeconform -strict -schema-location 'OUT_DIR/{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json' ...

kubeconform then validates offline against exactly what this API server serves: the
pinned Kubernetes version's types and every CRD installed there (ours).
One file per kind at <group>/<version>/<kind>.json (the core group is "v1/v1"), each a
standalone draft-04 schema: the kind's schema plus the definitions it reaches. "Strict":
every object schema that lists properties and says nothing about others gets
additionalProperties false, so a misspelt field fails (what `kubectl apply` would drop or
refuse). The conversion is pure (`json_schemas`); only `main` talks to the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

REF = "#/components/schemas/"


def strict(schema: Any) -> Any:
    """The schema with components refs rewritten and unknown properties refused. Walks the
    schema keywords only: "properties" is a map of names (a field may be called "properties")."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {name: strict(sub) for name, sub in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            out[key] = strict(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            out[key] = [strict(sub) for sub in schema[key]]
    if isinstance(out.get("$ref"), str) and out["$ref"].startswith(REF):
        out["$ref"] = "#/definitions/" + out["$ref"][len(REF):]
    if out.get("format") == "int-or-string":
        del out["format"]  # its oneOf [integer, string] says it; the format is not JSON Schema's
    return out


def _refs(schema: Any) -> set[str]:
    if isinstance(schema, list):
        return set().union(*(_refs(s) for s in schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = {schema["$ref"][len(REF):]} if str(schema.get("$ref", "")).startswith(REF) else set()
    return found.union(*(_refs(v) for v in schema.values()))


def _closure(name: str, components: dict[str, Any]) -> list[str]:
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in components:
            continue
        seen.add(current)
        todo.extend(_refs(components[current]))
    return sorted(seen)


def schema_path(group: str, version: str, kind: str) -> str:
    """Where kubeconform's template '{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json'
    looks: for apiVersion v1 its Group is "v1" too."""
    return f"{group or version}/{version}/{kind.lower()}.json"


def json_schemas(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """OpenAPI v3 documents (one per group-version) -> {relative path: JSON schema}."""
    out: dict[str, dict[str, Any]] = {}
    for document in documents:
        components = document.get("components", {}).get("schemas", {})
        for name, schema in components.items():
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                definitions = {n: strict(components[n]) for n in _closure(name, components) if n != name}
                root = strict(schema)
                root["$schema"] = "http://json-schema.org/draft-04/schema#"
                if definitions:
                    root["definitions"] = definitions
                out[schema_path(gvk["group"], gvk["version"], gvk["kind"])] = root
    return out


def fetch_documents(kubectl: str = "kubectl", env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every group-version's OpenAPI v3 document from the server $KUBECONFIG (in env) names."""
    def raw(path: str) -> dict[str, Any]:
        proc = subprocess.run([kubectl, "get", "--raw", path], capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"kubectl get --raw {path} failed: {proc.stderr.strip()}")
        return json.loads(proc.stdout)

    paths = [p for p in raw("/openapi/v3")["paths"] if p == "api/v1" or p.count("/") == 2 and p.startswith("apis/")]
    return [raw(f"/openapi/v3/{p}") for p in paths]


def write(schemas: dict[str, dict[str, Any]], out_dir: str) -> None:
    for rel, schema in schemas.items():
        path = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            json.dump(schema, handle)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: kubeconform_schemas.py OUT_DIR   (reads the API server of $KUBECONFIG)", file=sys.stderr)
        return 2
    schemas = json_schemas(fetch_documents(os.environ.get("KUBECTL", "kubectl")))
    write(schemas, argv[0])
    print(f"{len(schemas)} schemas in {argv[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
