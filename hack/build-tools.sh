#!/usr/bin/env bash
# Build the pinned control-plane and tooling binaries from upstream Go modules
# into a cache outside the checkout:
#
#   ${DISTTRAIN_CACHE:-~/.cache/disttrain}/tools-<set key>/bin
#     kube-apiserver kube-controller-manager kube-scheduler kubectl
#     etcd kwok kwokctl helm kubeconform
#     the real node (hack/node.sh): kubelet, containerd, containerd-shim-runc-v2,
#     ctr, coredns (cluster zone only), pause
#     kueue (Kueue's manager), coscheduler (kube-scheduler with the coscheduling plugin)
#     versitygw (an S3 server over a local directory, for checkpoint.uri)
#     registry (the CNCF distribution registry, for the install test of make push)
#
# Each tool is one small Go module under hack/tools/<module>/ (separate modules:
# kwok, helm and kubernetes want different client-go): its pins (go.mod, go.sum),
# any source of its own (*.go) and its recipe (build.sh, which calls `build NAME
# PACKAGE [go build args]`). A module's binaries are cached on their own key:
#
#   tool-<module>-<key>/   <key> hashes the module's directory, the go.mod of any
#                          other module its recipe reads a version from (`modver`),
#                          the shared part of this script and the Go version
#
# so adding or bumping one tool builds that tool only. The bin directory of a set is
# made of hard links to the modules' binaries; its key hashes the modules' keys.
# The module cache and build cache live under the same cache root (gopath/,
# gocache/), so CI clones and pin bumps reuse compiled packages.
#
# Usage:
#   hack/build-tools.sh              build what is missing, progress on stderr
#   hack/build-tools.sh --print-bin  print the bin directory only (no build)
#   hack/build-tools.sh --check      exit 0 only when the bin dir is complete
#   hack/build-tools.sh --keys       print each module's cache key (no build)
#   hack/build-tools.sh --only MOD...  build only these modules (what `make cluster-up`
#                                    needs: etcd kubernetes kwok) and link them into
#                                    the set's bin dir, which stays incomplete
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOOLS="$HACK/tools"
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
MODULES=(etcd kubernetes kwok kubeconform helm containerd coredns pause kueue scheduler-plugins versitygw kind registry)

# The part of this script every build depends on: from here to the end of `build`.
shared_part() { sed -n '/^# ---- shared by every module/,/^# ---- end of shared part/p' "$HACK/build-tools.sh"; }

GO_VERSION=$(go env GOVERSION GOOS GOARCH 2>/dev/null | tr '\n' ' ' || true)
[[ -n $GO_VERSION ]] || GO_VERSION=no-go

module_key() {
  local mod=$1 f dep
  {
    shared_part
    echo "$GO_VERSION"
    for f in "$TOOLS/$mod"/*; do
      [[ -f $f ]] || continue
      printf '%s\n' "${f##*/}"
      cat "$f"
    done
    for dep in $(grep -o 'modver [a-z0-9-]*' "$TOOLS/$mod/build.sh" | awk '{print $2}' | sort -u); do
      [[ $dep == "$mod" ]] || { printf 'dep %s\n' "$dep"; cat "$TOOLS/$dep/go.mod"; }
    done
  } | sha256sum | cut -c1-12
}

declare -A KEY=()
for mod in "${MODULES[@]}"; do
  KEY[$mod]=$(module_key "$mod")
done
set_key=$(for mod in "${MODULES[@]}"; do echo "$mod=${KEY[$mod]}"; done | sha256sum | cut -c1-12)
BIN="$CACHE/tools-$set_key/bin"

WANTED=("${MODULES[@]}")
case "${1:-}" in
  --print-bin) echo "$BIN"; exit 0 ;;
  --keys) for mod in "${MODULES[@]}"; do echo "$mod ${KEY[$mod]}"; done; exit 0 ;;
  --check) [[ -f "$BIN/.complete" ]]; exit ;;
  --only)
    shift
    (($#)) || { echo "usage: $0 --only MODULE... (of: ${MODULES[*]})" >&2; exit 2; }
    for mod in "$@"; do
      [[ -n ${KEY[$mod]:-} ]] || { echo "$0: no tool module '$mod' (of: ${MODULES[*]})" >&2; exit 2; }
    done
    WANTED=("$@") ;;
  "") ;;
  *) echo "usage: $0 [--print-bin|--check|--keys|--only MODULE...]" >&2; exit 2 ;;
esac

[[ -f "$BIN/.complete" ]] && exit 0

# link_module MOD: its binaries into the set's bin dir (hard links; copies across filesystems)
link_module() {
  local f
  mkdir -p "$BIN"
  for f in "$CACHE/tool-$1-${KEY[$1]}"/*; do
    ln -f "$f" "$BIN/${f##*/}" 2>/dev/null || cp -f "$f" "$BIN/${f##*/}"
  done
}
# --only with every wanted module built already: link them, no Go needed.
if ((${#WANTED[@]} < ${#MODULES[@]})); then
  built=1
  for mod in "${WANTED[@]}"; do [[ -f "$CACHE/tool-$mod-${KEY[$mod]}/.complete" ]] || built=0; done
  if ((built)); then
    for mod in "${WANTED[@]}"; do link_module "$mod"; done
    exit 0
  fi
fi

log() { printf '[build-tools] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found on PATH (need Go >= 1.26)"; exit 1; }
mkdir -p "$CACHE"

# One builder at a time per cache (a test fixture and `make tools` may race).
exec 9>"$CACHE/build-tools.lock"
if ! flock -n 9; then
  log "another build holds $CACHE/build-tools.lock; waiting"
  flock 9
fi
[[ -f "$BIN/.complete" ]] && exit 0

# ---- shared by every module (a change here rebuilds every tool) -----------------------
export GOPATH="$CACHE/gopath"
export GOMODCACHE="$CACHE/gopath/pkg/mod"
export GOCACHE="$CACHE/gocache"
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
unset GOOS GOARCH

# modver <module dir> <module path>: the pinned version of a dependency
modver() { (cd "$TOOLS/$1" && go list -m -f '{{.Version}}' "$2"); }

# build <output name> <package> [go build args...]: one binary of module $MOD into $OUT
build() {
  local name=$1 pkg=$2
  shift 2
  log "$name: building $pkg"
  local start=$SECONDS
  (cd "$TOOLS/$MOD" && go build -p 2 "$@" -o "$OUT/.$name.tmp" "$pkg")
  mv -f "$OUT/.$name.tmp" "$OUT/$name"
  log "$name: done in $((SECONDS - start))s"
}
# ---- end of shared part ----------------------------------------------------------------

total_start=$SECONDS
log "tool set $BIN (go $(go env GOVERSION), cache $CACHE)$( ((${#WANTED[@]} < ${#MODULES[@]})) && echo ": only ${WANTED[*]}")"
mkdir -p "$BIN"
for MOD in "${WANTED[@]}"; do
  OUT="$CACHE/tool-$MOD-${KEY[$MOD]}"
  if [[ -f "$OUT/.complete" ]]; then
    log "$MOD: present ($OUT)"
  else
    rm -rf "$OUT" && mkdir -p "$OUT"
    # shellcheck source=/dev/null
    source "$TOOLS/$MOD/build.sh"
    touch "$OUT/.complete"
  fi
  link_module "$MOD"
done

if ((${#WANTED[@]} < ${#MODULES[@]})); then
  log "${WANTED[*]} ready in $((SECONDS - total_start))s: $BIN (the rest of the set: make tools)"
  exit 0
fi
touch "$BIN/.complete"
# Drop tool sets and module builds of other pins not used for a week (a full set is
# ~0.5 GB): the cleanup looks at when each was last made or linked into a set.
for MOD in "${MODULES[@]}"; do touch "$CACHE/tool-$MOD-${KEY[$MOD]}"; done
find "$CACHE" -mindepth 1 -maxdepth 1 -type d \( -name 'tools-*' -o -name 'tool-*' \) -mtime +7 \
  ! -path "${BIN%/bin}" -exec rm -rf {} + 2>/dev/null || true
log "all tools ready in $((SECONDS - total_start))s: $BIN"
