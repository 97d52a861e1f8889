# kind, and crictl for the node image (kind's `load` runs it inside each node).
build kind sigs.k8s.io/kind -ldflags "-s -w"
CRICTL_VERSION=$(modver kind sigs.k8s.io/cri-tools)
build crictl sigs.k8s.io/cri-tools/cmd/crictl -ldflags "-s -w -X 'sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION'"
