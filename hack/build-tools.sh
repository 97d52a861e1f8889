#!/usr/bin/env bash
# Build the pinned control-plane and tooling binaries from upstream Go modules
# into a cache outside the checkout:
#
#   ${DISTTRAIN_CACHE:-~/.cache/disttrain}/tools-<key>/bin
#     kube-apiserver kube-controller-manager kube-scheduler kubectl
#     etcd kwok kwokctl helm kubeconform
#     the real node (hack/node.sh): kubelet, containerd, containerd-shim-runc-v2,
#     ctr, coredns (cluster zone only), pause
#
# <key> hashes this script, every hack/tools/*/go.{mod,sum} and *.go and the Go version,
# so changing a pin builds a fresh directory and a second run is a no-op.
# The module cache and build cache live under the same cache root
# (gopath/, gocache/), so CI clones and pin bumps reuse compiled packages.
#
# Pins live in the go.mod of one small module per tool under hack/tools/
# (separate modules: kwok, helm and kubernetes want different client-go).
#
# Usage:
#   hack/build-tools.sh              build what is missing, progress on stderr
#   hack/build-tools.sh --print-bin  print the bin directory only (no build)
#   hack/build-tools.sh --check      exit 0 only when the bin dir is complete
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOOLS="$HACK/tools"
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}

tools_key() {
  {
    cat "$HACK/build-tools.sh"
    for f in "$TOOLS"/*/go.mod "$TOOLS"/*/go.sum "$TOOLS"/*/*.go; do
      printf '%s\n' "${f#"$HACK"/}"
      cat "$f"
    done
    go env GOVERSION GOOS GOARCH 2>/dev/null || echo "no-go"
  } | sha256sum | cut -c1-12
}

BIN="$CACHE/tools-$(tools_key)/bin"

case "${1:-}" in
  --print-bin) echo "$BIN"; exit 0 ;;
  --check) [[ -f "$BIN/.complete" ]]; exit ;;
  "") ;;
  *) echo "usage: $0 [--print-bin|--check]" >&2; exit 2 ;;
esac

[[ -f "$BIN/.complete" ]] && exit 0

log() { printf '[build-tools] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found on PATH (need Go >= 1.26)"; exit 1; }
mkdir -p "$BIN" "$CACHE"

# One builder at a time per cache (a test fixture and `make tools` may race).
exec 9>"$CACHE/build-tools.lock"
if ! flock -n 9; then
  log "another build holds $CACHE/build-tools.lock; waiting"
  flock 9
fi
[[ -f "$BIN/.complete" ]] && exit 0

export GOPATH="$CACHE/gopath"
export GOMODCACHE="$CACHE/gopath/pkg/mod"
export GOCACHE="$CACHE/gocache"
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
unset GOOS GOARCH

# modver <module dir> <module path>: the pinned version of a dependency
modver() { (cd "$TOOLS/$1" && go list -m -f '{{.Version}}' "$2"); }

# build <module dir> <output name> <package> [go build args...]
build() {
  local mod=$1 name=$2 pkg=$3
  shift 3
  if [[ -x "$BIN/$name" ]]; then
    log "$name: present"
    return
  fi
  log "$name: building $pkg"
  local start=$SECONDS
  (cd "$TOOLS/$mod" && go build -p 2 "$@" -o "$BIN/.$name.tmp" "$pkg")
  mv -f "$BIN/.$name.tmp" "$BIN/$name"
  log "$name: done in $((SECONDS - start))s"
}

total_start=$SECONDS
log "building into $BIN (go $(go env GOVERSION), cache $CACHE)"

# etcd: the version k8s.io/kubernetes pins (its go.mod requires etcd/server/v3).
build etcd etcd go.etcd.io/etcd/server/v3 -ldflags "-s -w"

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
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  build kubernetes "$cmd" "k8s.io/kubernetes/cmd/$cmd" \
    -tags selinux,notest,grpcnotrace -ldflags "all=$kube_ldflags"
done

KWOK_VERSION=$(modver kwok sigs.k8s.io/kwok)
for cmd in kwok kwokctl; do
  build kwok "$cmd" "sigs.k8s.io/kwok/cmd/$cmd" -ldflags "-s -w \
    -X 'sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION' \
    -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=$KUBE_VERSION'"
done

build kubeconform kubeconform github.com/yannh/kubeconform/cmd/kubeconform \
  -ldflags "-s -w -X 'main.version=$(modver kubeconform github.com/yannh/kubeconform)'"

build helm helm helm.sh/helm/v4/cmd/helm \
  -ldflags "-s -w -X 'helm.sh/helm/v4/internal/version.version=$(modver helm helm.sh/helm/v4)' \
    -X 'helm.sh/helm/v4/internal/version.gitTreeState=clean'"

# The real node's runtime: containerd 2 from its Go module (upstream's version
# ldflags; no btrfs/devmapper/zfs snapshotters, so no cgo), CoreDNS with only
# the plugins the cluster zone needs (hack/tools/coredns/main.go), and the pod
# sandbox binary for the locally built pause image.
CONTAINERD_VERSION=$(modver containerd github.com/containerd/containerd/v2)
for cmd in containerd containerd-shim-runc-v2 ctr; do
  build containerd "$cmd" "github.com/containerd/containerd/v2/cmd/$cmd" \
    -tags no_btrfs,no_devmapper,no_zfs -ldflags "-s -w \
    -X 'github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION' \
    -X 'github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2'"
done
build coredns coredns . -ldflags "-s -w"
build pause pause . -ldflags "-s -w"

touch "$BIN/.complete"
# Drop tool sets of other pins not rebuilt for a week (each is ~0.5 GB).
find "$CACHE" -mindepth 1 -maxdepth 1 -name 'tools-*' ! -path "${BIN%/bin}" -mtime +7 \
  -exec rm -rf {} + 2>/dev/null || true
log "all tools built in $((SECONDS - total_start))s: $BIN"
