"""Every podTemplate setting that leaves the container sandbox, with the error the pod policy
gives for it: pinned by test_pod_policy.py and the validator's golden messages."""

from __future__ import annotations

ESCAPES = [
    ({"hostNetwork": True}, "spec.podTemplate.spec.hostNetwork: leaves the container sandbox: the pod would share the node's network (got True)"),
    ({"hostPID": True}, "spec.podTemplate.spec.hostPID: leaves the container sandbox"),
    ({"hostIPC": True}, "spec.podTemplate.spec.hostIPC: leaves the container sandbox"),
    ({"nodeName": "gpu-7"}, "spec.podTemplate.spec.nodeName: leaves the container sandbox: it skips the scheduler"),
    ({"serviceAccountName": "admin"}, "spec.podTemplate.spec.serviceAccountName: leaves the container sandbox: trainer pods get no Kubernetes API credentials (got 'admin')"),
    ({"serviceAccount": "admin"}, "spec.podTemplate.spec.serviceAccount: leaves"),
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
     "spec.podTemplate.spec.volumes[0].hostPath: leaves the container sandbox: a hostPath volume"),
    ({"volumes": [{"name": "t", "projected": {"sources": [{"configMap": {"name": "x"}},
                                                          {"serviceAccountToken": {"path": "token"}}]}}]},
     "spec.podTemplate.spec.volumes[0].projected.sources[1].serviceAccountToken: leaves"),
    ({"containers": [{"name": "side", "image": "x", "securityContext": {"privileged": True}}]},
     "spec.podTemplate.spec.containers[0].securityContext.privileged: leaves the container sandbox"),
    ({"containers": [{"name": "side", "image": "x", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}}}]},
     "spec.podTemplate.spec.containers[0].securityContext.capabilities.add[1]: leaves the container sandbox: "
     "capabilities beyond NET_BIND_SERVICE are refused (got 'SYS_ADMIN')"),
    ({"initContainers": [{"name": "init", "image": "x", "securityContext": {"allowPrivilegeEscalation": True}}]},
     "spec.podTemplate.spec.initContainers[0].securityContext.allowPrivilegeEscalation: leaves"),
    ({"initContainers": [{"name": "dbg", "image": "x", "securityContext": {"procMount": "Unmasked"}}]},
     "spec.podTemplate.spec.initContainers[0].securityContext.procMount: leaves"),
    ({"containers": [{"name": "trainer", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
     "spec.podTemplate.spec.containers[0].ports[0].hostPort: leaves"),
    ({"securityContext": {"runAsUser": 0}}, "spec.podTemplate.spec.securityContext.runAsUser: leaves"),
    ({"securityContext": {"runAsNonRoot": False}}, "spec.podTemplate.spec.securityContext.runAsNonRoot: leaves"),
    ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
     "spec.podTemplate.spec.securityContext.seccompProfile.type: leaves"),
    ({"securityContext": {"sysctls": [{"name": "kernel.panic", "value": "1"}]}},
     "spec.podTemplate.spec.securityContext.sysctls[0].name: leaves"),
    ({"securityContext": {"windowsOptions": {"hostProcess": True}}},
     "spec.podTemplate.spec.securityContext.windowsOptions.hostProcess: leaves"),
    ({"containers": [{"name": "trainer", "securityContext": {"seLinuxOptions": {"type": "spc_t"}}}]},
     "spec.podTemplate.spec.containers[0].securityContext.seLinuxOptions.type: leaves"),
]
