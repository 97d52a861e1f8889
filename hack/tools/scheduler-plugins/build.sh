# kube-scheduler with the scheduler-plugins (the coscheduling plugin: PodGroup gangs),
# run as a second scheduler; stamped with the Kubernetes version it was built from.
SP_KUBE_VERSION=$(modver scheduler-plugins k8s.io/kubernetes)
sp_ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  sp_ldflags+=" -X '$pkg.gitVersion=$SP_KUBE_VERSION' -X '$pkg.gitTreeState=archive' -X '$pkg.gitCommit='"
done
build coscheduler sigs.k8s.io/scheduler-plugins/cmd/scheduler -ldflags "all=$sp_ldflags"
# The PodGroup CRD the plugin reads, from the same release (the cluster tests install it).
cp "$(cd "$TOOLS/$MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)/manifests/coscheduling/crd.yaml" \
  "$OUT/podgroups.scheduling.x-k8s.io.yaml"
