#!/usr/bin/env bash
# For users with Docker: the scenario the real-node e2e tests run here, on kind. Builds
# both images from the Dockerfile, loads them into a kind cluster, installs the chart with
# them and trains the CPU example (manifests/examples/cpu-ddp-2x1.yaml) to Succeeded.
#
#   hack/kind-up.sh [up]   all of the above; prints `export KUBECONFIG=...` on stdout
#   hack/kind-up.sh print  the helm values and the objects `up` applies (needs no Docker)
#   hack/kind-up.sh down   delete the kind cluster
#
# Knobs: DISTTRAIN_KIND_NAME (disttrain), DOCKER_BUILD_ARGS (extra `docker build` flags,
# e.g. --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for a CPU-only
# trainer image). Shared with the real node: image names and OCI build args
# (hack/images.sh), the checkpoint claim (hack/local-volumes.sh), the chart, the example.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
NAME=${DISTTRAIN_KIND_NAME:-disttrain}
NODE=$NAME-control-plane
KUBECONFIG=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}/kind/$NAME/kubeconfig
export KUBECONFIG
CLAIM=cpu-ddp-checkpoints               # the claim the CPU example names
VOLUME_DIR=/var/local/disttrain/$CLAIM  # on the kind node (a container)
JOB=$(sed -n 's/^  name: //p' "$ROOT/manifests/examples/cpu-ddp-2x1.yaml" | head -n 1)

log() { printf '[kind-up %s] %s\n' "$NAME" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# "ghcr.io/disttrain/operator:0.1.0" etc., as hack/images.sh names them
image() { bash "$HACK/images.sh" names | awk -v t="/$1:" 'index($1, t) {print $1}'; }

values() {
  local operator
  operator=$(image operator)
  cat <<EOF
# helm values for kind: the operator image just loaded (never pulled)
image: {repository: ${operator%:*}, tag: "${operator##*:}", pullPolicy: Never}
EOF
}

objects() { bash "$HACK/local-volumes.sh" -n default --claim "$CLAIM" "$VOLUME_DIR"; }

up() {
  local tool target name args extra
  for tool in kind docker kubectl helm; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH (kind and docker: docs/local-cluster.md; kubectl, helm: bash hack/build-tools.sh, then add its --print-bin to PATH)"
  done
  mkdir -p "$(dirname "$KUBECONFIG")"
  if kind get clusters 2>/dev/null | grep -qx "$NAME"; then
    kind export kubeconfig --name "$NAME" --kubeconfig "$KUBECONFIG" >&2
  else
    kind create cluster --name "$NAME" --config "$HACK/cluster/kind.yaml" --kubeconfig "$KUBECONFIG" >&2
  fi
  for target in operator trainer; do
    name=$(image "$target")
    log "docker build --target $target -> $name"
    read -ra args <<<"$(bash "$HACK/images.sh" build-args)"
    read -ra extra <<<"${DOCKER_BUILD_ARGS:-}"
    docker build --target "$target" "${args[@]}" "${extra[@]}" -t "$name" "$ROOT" >&2
    kind load docker-image --name "$NAME" "$name" >&2
  done
  log "helm install disttrain charts/disttrain"
  helm upgrade --install disttrain "$ROOT/charts/disttrain" -n disttrain-system --create-namespace \
    -f <(values) --wait --timeout 5m >&2
  # The example checkpoints to a ReadWriteMany claim: a directory on the one kind node.
  docker exec "$NODE" sh -c "mkdir -p $VOLUME_DIR && chown 1000:1000 $VOLUME_DIR"
  objects | kubectl apply -f - >&2
  kubectl delete dt "$JOB" --ignore-not-found --wait=true >&2  # a fresh run each time
  kubectl apply -f "$ROOT/manifests/examples/cpu-ddp-2x1.yaml" >&2
  log "training $JOB (kubectl get dt -w shows progress)"
  if ! kubectl wait "dt/$JOB" --for=jsonpath='{.status.phase}'=Succeeded --timeout=15m >&2; then
    kubectl describe dt "$JOB" >&2
    die "$JOB did not succeed; kubectl logs -l disttrain.dev/job=$JOB has the workers' logs"
  fi
  kubectl get dt "$JOB" >&2
  echo "export KUBECONFIG=$KUBECONFIG"
}

case "${1:-up}" in
  up) up ;;
  print) echo "# values.yaml"; values; echo "# objects"; objects ;;
  down) command -v kind >/dev/null || die "kind not found"; kind delete cluster --name "$NAME" >&2 ;;
  *) echo "usage: $0 [up|print|down]" >&2; exit 2 ;;
esac
