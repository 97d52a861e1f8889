"""Finding the cluster as kubectl does: the kubeconfig (its contexts, their namespace),
or in a pod without one, the pod's service account."""

from __future__ import annotations

import os
from typing import Any

import yaml

from disttrain.client.errors import KubeconfigError


def connect(kubeconfig: str | None, context: str | None, *, fail_fast: bool = True) -> tuple[Any, str | None]:
    """(ApiClient, the context's namespace) from a kubeconfig, like kubectl; in a pod
    with no kubeconfig, its service account. fail_fast: no retry of a failed connection
    (a command fails at once, like kubectl); a sweep that runs for hours keeps urllib3's."""
    # All of the library before anything is read: an install that lacks part of it is
    # named first (the helpers below import them again, from the cache).
    from kubernetes import client as k8s
    from kubernetes import config  # noqa: F401
    from kubernetes.config.config_exception import ConfigException  # noqa: F401

    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    present = any(os.path.exists(os.path.expanduser(p)) for p in path.split(os.pathsep) if p)
    configuration = type.__call__(k8s.Configuration)
    if not present and not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        namespace = _load_in_cluster(path, configuration)
    else:
        if not present:
            raise KubeconfigError(f"error: no kubeconfig at {path}: set KUBECONFIG or pass --kubeconfig "
                                  "(make cluster-up prints the path of a local cluster's)")
        namespace = _load_kubeconfig(path, context, configuration)
    if fail_fast:
        configuration.retries = 0  # fail at once like kubectl, not after urllib3's three retries
    return k8s.ApiClient(configuration), namespace


def _load_in_cluster(path: str, configuration: Any) -> str | None:
    """The pod's service account into `configuration`; its namespace."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:  # a pod without its service account's token (the trainer's)
        raise KubeconfigError(f"error: no kubeconfig at {path}, and this pod's service account cannot be "
                              f"used: {' '.join(str(exc).split())}; set KUBECONFIG or mount the account's "
                              "token") from None
    namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    return open(namespace_file).read().strip() if os.path.exists(namespace_file) else None


def _load_kubeconfig(path: str, context: str | None, configuration: Any) -> str | None:
    """The kubeconfig files of `path` (checked first) into `configuration`, at `context` or
    the current one; that context's namespace."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        for part in (os.path.expanduser(p) for p in path.split(os.pathsep) if p):
            problem = kubeconfig_problem(_read_yaml(part)) if os.path.exists(part) else None
            if problem:
                raise KubeconfigError(f"error: {part}: not a kubeconfig: {problem}")
        contexts, current = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else current
        if context and chosen is None:
            raise KubeconfigError(f'error: context "{context}" does not exist in {path}; '
                                  f"known: {', '.join(c['name'] for c in contexts) or 'none'}")
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration,
                                persist_config=False)
    except ConfigException as exc:
        raise KubeconfigError(f"error: {path}: {' '.join(str(exc).split())}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise KubeconfigError(f"error: {path}: not YAML{where}: {getattr(exc, 'problem', None) or exc}; "
                              "check the file, or point --kubeconfig at another") from None
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        # What kubeconfig_problem does not look at: the client library walks the file
        # without checking the kinds of its values.
        raise KubeconfigError(f"error: {path}: not a kubeconfig: {type(exc).__name__}: {exc}") from None
    return ((chosen or {}).get("context") or {}).get("namespace")


def _read_yaml(path: str) -> Any:
    """A kubeconfig file's YAML. It must be UTF-8 (YAML's encoding, and kubectl's); the
    client library would fail on another without saying where."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode()  # UTF-8
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise KubeconfigError(f"error: {path}: line {line} is not UTF-8 (byte {data[exc.start]:#04x}); "
                              "save the file as UTF-8") from None
    try:
        return yaml.safe_load(text)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow: no line of its own, two lines of text
        line = text.count("\n", 0, exc.position) + 1
        raise KubeconfigError(f"error: {path}: not YAML: line {line} holds the character #x{exc.character:04x}, "
                              "which YAML does not allow; check the file, or point --kubeconfig at another") from None


def kubeconfig_problem(data: Any) -> str | None:
    """What makes a parsed kubeconfig file unusable before the client library reads it
    (it would fail with a TypeError deep inside), in words; None when its shape is right."""
    if data is None:
        return None  # an empty file: kubectl treats it as no entries
    if not isinstance(data, dict):
        return f"the file must be a map with clusters, contexts and users (got {type(data).__name__})"
    for key, inner in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
        entries = data.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            return f"{key} must be a list of {{name, {inner}}} (got {type(entries).__name__})"
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                return f"{key}[{i}] must be a map with a name and a {inner}"
            if not isinstance(entry.get(inner) or {}, dict):
                return f"{key}[{i}].{inner} must be a map"
    if not isinstance(data.get("current-context") or "", str):
        return "current-context must be a string"
    return None

