#!/usr/bin/env bash
# Volumes for the examples on a cluster without a volume provisioner (`make cluster-up`:
# pods on its KWOK nodes never mount anything, but the scheduler places no pod whose
# claim is unbound). Real clusters provision from their StorageClass instead.
#
#   bash hack/local-volumes.sh [-n NAMESPACE] FILE...       | kubectl apply -f -
#       a PersistentVolume pre-bound to each PersistentVolumeClaim FILE ships
#   bash hack/local-volumes.sh [-n NAMESPACE] --claim NAME [DIR] | kubectl apply -f -
#       a claim NAME (ReadWriteMany, 1Gi) and its PersistentVolume, for an example that
#       names a claim it does not ship; with DIR, the volume is that directory on the node
#       (it must exist; hack/kind.sh makes it, writable by uid 1000)
#
# NAMESPACE (default: the current kubectl context's, else "default") is where the claims live. The volumes have no
# StorageClass, a hostPath nothing mounts, and the label disttrain.dev/local-volume=true
# (kubectl delete pv -l disttrain.dev/local-volume=true removes them).
set -euo pipefail

usage() { echo "usage: $0 [-n NAMESPACE] FILE... | --claim NAME [DIR]" >&2; exit 2; }
KUBECTL=${KUBECTL:-kubectl}
namespace=
if [[ ${1:-} == -n ]]; then namespace=${2:-}; [[ -n $namespace ]] || usage; shift 2; fi
(($#)) || usage
if [[ -z $namespace ]]; then
  namespace=$("$KUBECTL" config view --minify -o 'jsonpath={..namespace}' 2>/dev/null || true)
  namespace=${namespace:-default}
fi

volume() { # claim access-modes size [host-dir]
  cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $namespace-$1
  labels: {disttrain.dev/local-volume: "true"}
spec:
  capacity: {storage: $3}
  accessModes: $2
  storageClassName: ""
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: $namespace, name: $1}
  hostPath: {path: ${4:-/nonexistent/disttrain-local-volume}${4:+, type: Directory}}
YAML
}

if [[ $1 == --claim ]]; then
  [[ -n ${2:-} ]] || usage
  volume "$2" '[ReadWriteMany]' 1Gi "${3:-}"
  cat <<YAML
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $2, namespace: $namespace}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: $namespace-$2
  resources: {requests: {storage: 1Gi}}
YAML
  exit 0
fi

for file in "$@"; do
  # kind<TAB>name<TAB>modes<TAB>size per object; --dry-run=client creates nothing.
  "$KUBECTL" create --dry-run=client -f "$file" \
    -o jsonpath='{.kind}{"\t"}{.metadata.name}{"\t"}{.spec.accessModes}{"\t"}{.spec.resources.requests.storage}{"\n"}' |
    while IFS=$'\t' read -r kind name modes size; do
      if [[ $kind == PersistentVolumeClaim ]]; then volume "$name" "$modes" "$size"; fi
    done
done
