# kwok and kwokctl, stamped with their version and the Kubernetes version we pin.
KWOK_VERSION=$(modver kwok sigs.k8s.io/kwok)
KUBE_VERSION=$(modver kubernetes k8s.io/kubernetes)
for cmd in kwok kwokctl; do
  build "$cmd" "sigs.k8s.io/kwok/cmd/$cmd" -ldflags "-s -w \
    -X 'sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION' \
    -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=$KUBE_VERSION'"
done
