"""The pod policy the platform owns: which podTemplate settings that leave the container's
sandbox the operator refuses (docs/security.md).

Whoever may create a DistributedTraining gets pods created under the operator's identity,
so by default the operator refuses what Pod Security Admission's `baseline` level refuses
and a little more: privileged containers, host namespaces and ports, hostPath volumes,
capabilities beyond SAFE_CAPABILITIES, Kubernetes API credentials (a service account, or a
projected service-account token), `nodeName` (which skips the scheduler, its taints and
quotas) and root in the container. A platform allows them, for every namespace or for listed
ones, with an operator setting (env below; Helm `podPolicy`). Pure: no I/O, env is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from disttrain.api.errors import FieldError

ENV_ALLOW_ALL = "DISTTRAIN_POD_POLICY_ALLOW_ALL"
ENV_ALLOW_NAMESPACES = "DISTTRAIN_POD_POLICY_ALLOW_NAMESPACES"
# What Pod Security Admission's `restricted` level lets a container add.
SAFE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# Namespaced sysctls PSA `baseline` allows.
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
SAFE_SELINUX_TYPES = frozenset({"container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
PREFIX = "spec.podTemplate.spec"


@dataclass(frozen=True, slots=True)
class PodPolicy:
    """Where podTemplate settings that leave the sandbox are allowed."""

    allow_all: bool = False
    """allow_all: every namespace may set them (the operator's behaviour before 0.2)."""
    allowed_namespaces: frozenset[str] = frozenset()
    """allowed_namespaces: namespaces whose jobs may set them."""

    def allows(self, namespace: str | None) -> bool:
        return self.allow_all or (namespace is not None and namespace in self.allowed_namespaces)

    def describe(self) -> str:
        if self.allow_all:
            return "allow-all"
        if self.allowed_namespaces:
            return "refuse, except in " + ", ".join(sorted(self.allowed_namespaces))
        return "refuse"


def pod_policy_from_env(environ: Mapping[str, str]) -> PodPolicy:
    """The operator's setting: DISTTRAIN_POD_POLICY_ALLOW_ALL=true|false and
    DISTTRAIN_POD_POLICY_ALLOW_NAMESPACES=a,b. Raises ValueError naming a bad value."""
    raw = environ.get(ENV_ALLOW_ALL, "").strip().lower()
    if raw not in ("", "true", "false"):
        raise ValueError(f"{ENV_ALLOW_ALL}={environ[ENV_ALLOW_ALL]!r}: set it to true or false")
    names = frozenset(n.strip() for n in environ.get(ENV_ALLOW_NAMESPACES, "").split(",") if n.strip())
    return PodPolicy(allow_all=raw == "true", allowed_namespaces=names)


def check_pod_policy(pod_spec: Any, namespace: str | None, policy: PodPolicy,
                     annotations: Any = None) -> list[FieldError]:
    """Every sandbox-leaving setting of a podTemplate (its spec, and the legacy AppArmor and
    seccomp annotations of its metadata) the policy does not allow."""
    if policy.allows(namespace):
        return []
    hint = ("remove it; if this namespace needs it, the platform team allows it with the "
            f"operator setting podPolicy.allowNamespaces ({ENV_ALLOW_NAMESPACES})")
    allowed = "refused by the operator's pod policy (docs/security.md)"
    found = [*(_escapes(pod_spec) if isinstance(pod_spec, dict) else ()), *_annotation_escapes(annotations)]
    return [FieldError(path, value, f"leaves the container sandbox: {why}", allowed, hint)
            for path, value, why in found]


# The annotations kubelets read before the securityContext fields existed (and still do,
# for AppArmor): any container of the pod, sidecars included, is named in the key.
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_ANNOTATIONS = ("seccomp.security.alpha.kubernetes.io/pod", "container.seccomp.security.alpha.kubernetes.io/")


def _annotation_escapes(annotations: Any) -> Iterator[tuple[str, Any, str]]:
    if not isinstance(annotations, dict):
        return
    for key, value in annotations.items():
        if not isinstance(key, str):
            continue
        path = f"spec.podTemplate.metadata.annotations['{key}']"
        if key.startswith(APPARMOR_ANNOTATION) and not (
                value in ("", "runtime/default") or (isinstance(value, str) and value.startswith("localhost/"))):
            yield path, value, "the container would run without its AppArmor profile"
        elif key.startswith(SECCOMP_ANNOTATIONS) and value == "unconfined":
            yield path, value, "the container would run without its kernel filter"


def _escapes(pod: dict) -> Iterator[tuple[str, Any, str]]:
    for key, why in (("hostNetwork", "the pod would share the node's network"),
                     ("hostPID", "the pod would see and signal the node's processes"),
                     ("hostIPC", "the pod would share the node's IPC namespace")):
        if pod.get(key) is True:
            yield f"{PREFIX}.{key}", True, why
    if pod.get("nodeName"):
        yield f"{PREFIX}.nodeName", pod["nodeName"], "it skips the scheduler, taints and quotas"
    for key in ("serviceAccountName", "serviceAccount"):
        if pod.get(key):
            yield f"{PREFIX}.{key}", pod[key], "trainer pods get no Kubernetes API credentials"
    yield from _security_context(pod.get("securityContext"), f"{PREFIX}.securityContext", pod=True)
    volumes = pod.get("volumes")
    for i, volume in _items(volumes):
        path = f"{PREFIX}.volumes[{i}]"
        if "hostPath" in volume:
            yield f"{path}.hostPath", volume["hostPath"], "a hostPath volume reaches the node's files"
        sources = (volume.get("projected") or {}).get("sources") if isinstance(volume.get("projected"), dict) else None
        for j, source in _items(sources):
            if "serviceAccountToken" in source:
                yield (f"{path}.projected.sources[{j}].serviceAccountToken", source["serviceAccountToken"],
                       "a service-account token gives the pod Kubernetes API credentials")
    for kind in CONTAINER_LISTS:
        for i, container in _items(pod.get(kind)):
            path = f"{PREFIX}.{kind}[{i}]"
            yield from _security_context(container.get("securityContext"), f"{path}.securityContext")
            for k, port in _items(container.get("ports")):
                if port.get("hostPort"):
                    yield f"{path}.ports[{k}].hostPort", port["hostPort"], "a host port binds on the node"


def _security_context(ctx: Any, path: str, pod: bool = False) -> Iterator[tuple[str, Any, str]]:
    if not isinstance(ctx, dict):
        return
    if ctx.get("privileged") is True:
        yield f"{path}.privileged", True, "a privileged container has every device and capability"
    if ctx.get("allowPrivilegeEscalation") is True:
        yield f"{path}.allowPrivilegeEscalation", True, "setuid binaries could gain privileges"
    capabilities = ctx.get("capabilities")
    added = capabilities.get("add") if isinstance(capabilities, dict) else None
    for k, cap in enumerate(added if isinstance(added, list) else []):
        name = cap.upper().removeprefix("CAP_") if isinstance(cap, str) else cap
        if name not in SAFE_CAPABILITIES:
            yield (f"{path}.capabilities.add[{k}]", cap,
                   f"capabilities beyond {', '.join(sorted(SAFE_CAPABILITIES))} are refused")
    if ctx.get("procMount") not in (None, "Default"):
        yield f"{path}.procMount", ctx["procMount"], "an unmasked /proc exposes the node's kernel"
    if ctx.get("runAsNonRoot") is False:
        yield f"{path}.runAsNonRoot", False, "trainer pods run as non-root"
    if ctx.get("runAsUser") == 0:
        yield f"{path}.runAsUser", 0, "trainer pods run as non-root"
    for key in ("seccompProfile", "appArmorProfile"):
        profile = ctx.get(key)
        if isinstance(profile, dict) and profile.get("type") == "Unconfined":
            yield f"{path}.{key}.type", "Unconfined", "the container would run without its kernel filter"
    windows = ctx.get("windowsOptions")
    if isinstance(windows, dict) and windows.get("hostProcess") is True:
        yield f"{path}.windowsOptions.hostProcess", True, "a host process runs on the node itself"
    selinux = ctx.get("seLinuxOptions")
    if isinstance(selinux, dict):
        if selinux.get("type") not in (None, "", *SAFE_SELINUX_TYPES):
            yield f"{path}.seLinuxOptions.type", selinux["type"], "a custom SELinux type can leave the sandbox"
        for key in ("user", "role"):
            if selinux.get(key):
                yield f"{path}.seLinuxOptions.{key}", selinux[key], "a custom SELinux user or role is refused"
    if pod:
        for k, sysctl in _items(ctx.get("sysctls")):
            if sysctl.get("name") not in SAFE_SYSCTLS:
                yield f"{path}.sysctls[{k}].name", sysctl.get("name"), "only the namespaced safe sysctls are allowed"


def _items(value: Any) -> Iterator[tuple[int, dict]]:
    for i, item in enumerate(value if isinstance(value, list) else []):
        if isinstance(item, dict):
            yield i, item
