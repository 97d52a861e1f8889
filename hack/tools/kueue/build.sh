# Kueue's manager, stamped with its version as its Makefile does.
KUEUE_VERSION=$(modver kueue sigs.k8s.io/kueue)
build kueue sigs.k8s.io/kueue/cmd/kueue \
  -ldflags "-s -w -X 'sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION'"
# Its CRDs and webhook configurations from the same release, for the cluster tests
# (tests/cluster/reconcile/conftest.py `kueue` runs the manager on the host and points
# the webhooks at it). Each CRD file is its own YAML document.
KUEUE_DIR=$(cd "$TOOLS/$MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
awk 'FNR == 1 && !/^---$/ { print "---" } 1' "$KUEUE_DIR"/config/components/crd/bases/*.yaml >"$OUT/kueue-crds.yaml"
cp "$KUEUE_DIR/config/components/webhook/manifests.yaml" "$OUT/kueue-webhooks.yaml"
