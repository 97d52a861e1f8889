"""Finding the cluster as kubectl does: the kubeconfig (its contexts, their namespace),
or in a pod without one, the pod's service account."""

from __future__ import annotations

import os
from typing import Any

import yaml

from disttrain.client.errors import KubeconfigError

# The keys a kubeconfig file may have (kubectl's Config); a map with none of them is not one.
KUBECONFIG_KEYS = {"apiVersion", "kind", "clusters", "contexts", "users", "current-context", "preferences",
                   "extensions"}


def connect(kubeconfig: str | None, context: str | None, *, fail_fast: bool = True) -> tuple[Any, str | None]:
    """(ApiClient, the context's namespace) from a kubeconfig, like kubectl; in a pod
    with no kubeconfig, its service account. fail_fast: no retry of a failed connection
    (a command fails at once, like kubectl); a sweep that runs for hours keeps urllib3's."""
    # All of the library before anything is read: an install that lacks part of it is
    # named first (the helpers below import them again, from the cache).
    from kubernetes import client as k8s
    from kubernetes import config  # noqa: F401
    from kubernetes.config.config_exception import ConfigException  # noqa: F401

    path, source = _named(kubeconfig)
    present = any(os.path.exists(p) for p in _parts(path))
    configuration = type.__call__(k8s.Configuration)
    if not present and not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        namespace = _load_in_cluster(path, configuration)
    else:
        if not present:
            raise KubeconfigError(_missing(path, source))
        namespace = _load_kubeconfig(path, source, context, configuration)
    if fail_fast:
        configuration.retries = 0  # fail at once like kubectl, not after urllib3's three retries
    return k8s.ApiClient(configuration), namespace


def named(kubeconfig: str | None) -> str:
    """Where a command's kubeconfig comes from, as an error names it: `KUBECONFIG=PATH`,
    `--kubeconfig=PATH`, or the default's path."""
    path, source = _named(kubeconfig)
    return f"{source}={path}" if source else path


def _named(kubeconfig: str | None) -> tuple[str, str]:
    """The kubeconfig's path and what named it ("--kubeconfig", "KUBECONFIG", or "" for
    the default), as kubectl chooses: the flag, else the variable, else ~/.kube/config."""
    if kubeconfig:
        return kubeconfig, "--kubeconfig"
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"], "KUBECONFIG"
    return os.path.expanduser("~/.kube/config"), ""


def _parts(path: str) -> list[str]:
    """The files of a path list (':'-joined, as $KUBECONFIG may be)."""
    return [os.path.expanduser(p) for p in path.split(os.pathsep) if p]


def _missing(path: str, source: str) -> str:
    """The error for a kubeconfig path that names no file: what named it, and the fix."""
    if not source:
        return (f"error: no kubeconfig at {path}: set KUBECONFIG or pass --kubeconfig "
                "(make cluster-up prints the path of a local cluster's)")
    unset = ", or unset it to read ~/.kube/config" if source == "KUBECONFIG" else ""
    return (f"error: {source}={path}: no such file: point {source} at an existing kubeconfig "
            f"(make cluster-up prints the path of a local cluster's){unset}")


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


def _load_kubeconfig(path: str, source: str, context: str | None, configuration: Any) -> str | None:
    """The kubeconfig files of `path` (checked first) into `configuration`, at `context` or
    the current one; that context's namespace."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    fix = f"point {source or 'KUBECONFIG'} at a kubeconfig file"
    try:
        files = [_checked(part, source, fix) for part in _parts(path) if os.path.exists(part)]
        if all(data is None for data in files):
            raise KubeconfigError(f"error: {path}: the file is empty: {fix}")
        problem = context_problem(files, context)
        if problem:
            raise KubeconfigError(f"error: {path}: {problem}")
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


def _checked(part: str, source: str, fix: str) -> Any:
    """One kubeconfig file's YAML, refused in words when it cannot be one: a directory,
    a file that cannot be read, a shape the client library would fail on."""
    if os.path.isdir(part):
        named = f"{source}={part}" if source else part
        inside = os.path.join(part, "config")
        raise KubeconfigError(f"error: {named} is a directory, not a kubeconfig file: point "
                              f"{source or 'KUBECONFIG'} at the file itself "
                              f"({'here: ' if os.path.isfile(inside) else 'e.g. '}{inside})")
    try:
        data = _read_yaml(part)
    except OSError as exc:
        raise KubeconfigError(f"error: {part}: cannot be read: {exc.strerror}; check its permissions, "
                              f"or {fix}") from None
    problem = kubeconfig_problem(data)
    if problem:
        raise KubeconfigError(f"error: {part}: not a kubeconfig: {problem}; {fix}")
    return data


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


def context_problem(files: list[Any], context: str | None) -> str | None:
    """What keeps the context a command would use from being loaded (none chosen, one the
    files do not have, its cluster missing), in words with the fix; None when it can be.
    The files merge as kubectl merges them: the first to name a thing wins. `files` are
    shaped as kubeconfig_problem requires; a --context the files lack is said elsewhere."""
    maps = [data for data in files if isinstance(data, dict)]
    contexts: dict[str, dict[str, Any]] = {}
    for data in maps:
        for entry in data.get("contexts") or ():
            contexts.setdefault(entry["name"], entry.get("context") or {})
    clusters = list(dict.fromkeys(e["name"] for data in maps for e in data.get("clusters") or ()))
    current = next((data["current-context"] for data in maps if data.get("current-context")), None)
    name = context or current
    known = f"it has: {', '.join(contexts)}" if contexts else "it has none"
    if not name:
        one = next(iter(contexts)) if len(contexts) == 1 else "NAME"
        return (f"no current context: pass --context {one}, or run `kubectl config use-context {one}`"
                + (f" ({known})" if len(contexts) > 1 else "" if contexts else
                   " after adding one (`kubectl config set-context`)"))
    if name not in contexts:
        return None if context else (f'current-context "{name}" is not one of its contexts ({known}): '
                                     "run `kubectl config use-context NAME`, or pass --context NAME")
    cluster = contexts[name].get("cluster")
    if not cluster:
        return f'context "{name}" names no cluster: run `kubectl config set-context {name} --cluster NAME`'
    if cluster not in clusters:
        return (f'context "{name}" names the cluster "{cluster}", which the file does not have '
                f"(it has: {', '.join(clusters) or 'none'}): fix the context, or run "
                f"`kubectl config set-context {name} --cluster NAME`")
    return None


def kubeconfig_problem(data: Any) -> str | None:
    """What makes a parsed kubeconfig file unusable before the client library reads it
    (it would fail with a TypeError deep inside), in words; None when its shape is right."""
    if data is None:
        return None  # an empty file: kubectl treats it as no entries
    if not isinstance(data, dict):
        return f"the file must be a map with clusters, contexts and users (got {type(data).__name__})"
    if data and not set(data) & KUBECONFIG_KEYS:  # YAML, but of something else
        return f"it has no clusters, contexts or users (its keys: {', '.join(map(str, data))})"
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

