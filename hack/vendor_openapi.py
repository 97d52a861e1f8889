"""Vendor the Kubernetes core/v1 schemas the CRD embeds (pod spec, affinity, tolerations,
env sources) from the pinned API server's OpenAPI v3, trimmed to what users may set.

    make openapi   # starts the local control plane, reads /openapi/v3/api/v1, writes the module
    python hack/vendor_openapi.py core-v1.json > operator/disttrain/api/k8s_openapi.py

The output is a generated Python module (no file I/O at run time); `make crd` builds the
CRD from it, and tests/cluster/test_crd.py checks it against the running API server's
version. Descriptions are cut to their first sentence (the CRD must stay small enough for
client-side `kubectl apply`); definitions keep their $refs (api/k8s.py inlines them).
"""

from __future__ import annotations

import json
import re
import sys

ROOTS = ["io.k8s.api.core.v1.PodSpec"]
# Fields of these definitions users may not set, or that no current cluster runs.
DROP = {
    # Ephemeral containers are added through the pods/ephemeralcontainers subresource only.
    "io.k8s.api.core.v1.PodSpec": {"ephemeralContainers"},
    # In-tree volume plugins removed from Kubernetes (their CSI drivers replace them).
    "io.k8s.api.core.v1.Volume": {"awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder",
                                  "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
                                  "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO",
                                  "storageos", "vsphereVolume", "flexVolume"},
}
# No `default`: core/v1 defaults are Go zero values ("" for required enums, {} for
# objects) that a CRD schema rejects; the API server defaults the pod when it is created.
KEEP_KEYS = {"type", "format", "description", "properties", "items", "required", "enum",
             "additionalProperties", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
             "x-kubernetes-map-type", "$ref", "minimum", "maximum", "maxLength", "maxItems", "pattern"}
SPECIAL = {  # inlined as CRDs write them
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"x-kubernetes-int-or-string": True},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"x-kubernetes-int-or-string": True},
}


def first_sentence(text: str) -> str:
    text = text.split("\n\nPossible enum values:")[0].split("\n\n")[0].replace("\n", " ").strip()
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    text = match.group(1) if match else text
    return text if len(text) <= 200 else text[:197] + "..."


def clean(schema: object) -> object:
    if isinstance(schema, list):
        return [clean(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "allOf" in schema and len(schema["allOf"]) == 1:  # OpenAPI v3's way to add a default to a $ref
        merged = {**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}
        return clean(merged)
    out = {}
    for key, value in schema.items():
        if key not in KEEP_KEYS:
            continue
        if key == "description":
            out[key] = first_sentence(value)
        elif key == "$ref":
            out[key] = value.rsplit("/", 1)[-1]
        elif key == "properties":
            out[key] = {k: clean(v) for k, v in value.items()}
        else:
            out[key] = clean(value)
    return out


def list_map_key_defaults(schemas: dict, kept: dict) -> None:
    """A CRD list-type map needs its keys required or defaulted: keep the upstream default
    of exactly those keys (ports' protocol: TCP, imagePullSecrets' name: "")."""
    for schema in kept.values():
        stack = [schema]
        while stack:
            node = stack.pop()
            if not isinstance(node, dict):
                continue
            keys = node.get("x-kubernetes-list-map-keys")
            target = (node.get("items") or {}).get("$ref")
            if keys and target in kept:
                props = schemas[target].get("properties", {})
                for key in keys:
                    upstream = props.get(key, {})
                    default = upstream.get("default", (upstream.get("allOf") or [{}])[0].get("default"))
                    if key not in kept[target].get("required", []) and default is not None:
                        kept[target]["properties"][key]["default"] = default
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
            stack.extend(x for v in node.values() if isinstance(v, list) for x in v)
            stack.extend(node.get("properties", {}).values())


def closure(schemas: dict, roots: list[str]) -> dict:
    out, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        if name in SPECIAL:
            out[name] = SPECIAL[name]
            continue
        schema = clean(schemas[name])
        for prop in DROP.get(name, ()):
            schema.get("properties", {}).pop(prop, None)
        out[name] = schema
        todo.extend(re.findall(r"'\$ref': '([^']+)'", repr(schema)))
    list_map_key_defaults(schemas, out)
    return dict(sorted(out.items()))


def main() -> None:
    with open(sys.argv[1]) as handle:
        document = json.load(handle)
    version = sys.argv[2] if len(sys.argv) > 2 else "unknown"
    schemas = closure(document["components"]["schemas"], ROOTS)
    sys.stdout.write(
        f'"""Kubernetes {version} core/v1 schemas (pod spec and what it uses), generated by\n'
        "hack/vendor_openapi.py from the API server's /openapi/v3/api/v1; do not edit.\n"
        'Regenerate with `make openapi` when the pinned Kubernetes version changes."""\n\n'
        "import json\n\n"
        f"KUBERNETES_VERSION = {version!r}\n"
        "# One definition a line, as JSON (compact, and diffs show which definition changed).\n"
        "SCHEMAS = json.loads(r\"\"\"{\n"
        + ",\n".join(f"{json.dumps(name)}: {json.dumps(schema, sort_keys=True)}" for name, schema in schemas.items())
        + "\n}\"\"\")\n")


if __name__ == "__main__":
    main()
