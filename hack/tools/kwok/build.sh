# kwok and kwokctl, stamped with their version and the Kubernetes version we pin.
KWOK_VERSION=$(modver kwok sigs.k8s.io/kwok)
KUBE_VERSION=$(modver kubernetes k8s.io/kubernetes)
for cmd in kwok kwokctl; do
  build "$cmd" "sigs.k8s.io/kwok/cmd/$cmd" -ldflags "-s -w \
    -X 'sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION' \
    -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=$KUBE_VERSION'"
done
# The CRDs of KWOK's Logs and ClusterLogs, from the same release: with them installed, a
# fake pod's log is a file KWOK serves to `kubectl logs` (hack/cluster.sh installs them).
kwok_dir=$(cd "$TOOLS/$MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for kind in logs clusterlogs; do
  cp "$kwok_dir/kustomize/crd/bases/kwok.x-k8s.io_$kind.yaml" "$OUT/$kind.kwok.x-k8s.io.yaml"
done
