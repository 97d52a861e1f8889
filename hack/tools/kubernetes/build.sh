# Kubernetes: upstream's hack/lib/golang.sh tags and hack/lib/version.sh ldflags.
KUBE_VERSION=$(modver kubernetes k8s.io/kubernetes)
KUBE_DATE=$(cd "$TOOLS/kubernetes" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
kube_major=${KUBE_VERSION#v}; kube_major=${kube_major%%.*}
kube_minor=${KUBE_VERSION#v*.}; kube_minor=${kube_minor%%.*}
kube_ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  kube_ldflags+=" -X '$pkg.gitVersion=$KUBE_VERSION' -X '$pkg.gitMajor=$kube_major'"
  # A module zip carries no commit: clear the "$Format:%H$" placeholder.
  kube_ldflags+=" -X '$pkg.gitMinor=$kube_minor' -X '$pkg.gitTreeState=archive' -X '$pkg.gitCommit='"
  kube_ldflags+=" -X '$pkg.buildDate=$KUBE_DATE'"
done
# kubeadm and kube-proxy: the kind node image (hack/kind/node-image.sh).
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kubeadm kube-proxy; do
  build "$cmd" "k8s.io/kubernetes/cmd/$cmd" -tags selinux,notest,grpcnotrace -ldflags "all=$kube_ldflags"
done
