# Kueue's manager, stamped with its version as its Makefile does.
KUEUE_VERSION=$(modver kueue sigs.k8s.io/kueue)
build kueue sigs.k8s.io/kueue/cmd/kueue \
  -ldflags "-s -w -X 'sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION'"
