#!/usr/bin/env bash
# For users with Docker: a kind cluster plus the same KWOK fake GPU nodes and
# pod stages as hack/cluster.sh (see docs/local-cluster.md).
#
#   hack/kind-up.sh [up]   create kind cluster $DISTTRAIN_KIND_NAME (disttrain),
#                          start KWOK on the host, add the fake nodes, build our
#                          two images from the Dockerfile, load them into kind and
#                          `helm install` the chart; prints `export KUBECONFIG=...`
#                          (the same scenario the real-node e2e tests run)
#   hack/kind-up.sh down   stop KWOK and delete the kind cluster
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
NAME=${DISTTRAIN_KIND_NAME:-disttrain}
DIR=$CACHE/kind/$NAME
KUBECONFIG=$DIR/kubeconfig
export KUBECONFIG

log() { printf '[kind-up %s] %s\n' "$NAME" "$*" >&2; }

case "${1:-up}" in
  up)
    for tool in kind docker; do
      command -v "$tool" >/dev/null || { log "$tool not found; use hack/cluster.sh instead"; exit 1; }
    done
    bash "$HACK/build-tools.sh"
    BIN=$(bash "$HACK/build-tools.sh" --print-bin)
    mkdir -p "$DIR"
    if ! kind get clusters 2>/dev/null | grep -qx "$NAME"; then
      kind create cluster --name "$NAME" --config "$HACK/cluster/kind.yaml" --kubeconfig "$KUBECONFIG" >&2
    else
      kind export kubeconfig --name "$NAME" --kubeconfig "$KUBECONFIG" >&2
    fi
    if ! { pid=$(cat "$DIR/kwok.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null; }; then
      KWOK_WORKDIR="$DIR/kwok" setsid "$BIN/kwok" --config "$HACK/cluster/kwok-stages.yaml" --kubeconfig "$KUBECONFIG" \
        --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
        --cidr 10.244.128.1/17 --node-ip 10.240.0.1 </dev/null >"$DIR/kwok.log" 2>&1 &
      echo $! >"$DIR/kwok.pid"
    fi
    bash "$HACK/cluster.sh" _nodes | "$BIN/kubectl" apply -f - >&2
    "$BIN/kubectl" wait --for=condition=Ready node -l type=kwok --timeout=60s >&2
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$HACK/../pyproject.toml")
    for target in operator trainer; do
      docker build --target "$target" -t "ghcr.io/disttrain/$target:$version" "$HACK/.." >&2
      kind load docker-image --name "$NAME" "ghcr.io/disttrain/$target:$version" >&2
    done
    "$BIN/helm" upgrade --install disttrain "$HACK/../charts/disttrain" -n disttrain-system \
      --create-namespace --set-string "nodeSelector.kubernetes\\.io/hostname=$NAME-control-plane" --wait >&2
    log "up; KWOK log: $DIR/kwok.log"
    echo "export KUBECONFIG=$KUBECONFIG"
    ;;
  down)
    if pid=$(cat "$DIR/kwok.pid" 2>/dev/null); then kill -- "-$pid" 2>/dev/null || true; fi
    command -v kind >/dev/null && kind delete cluster --name "$NAME" >&2 || true
    rm -rf "$DIR"
    ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
