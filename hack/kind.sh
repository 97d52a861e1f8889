#!/usr/bin/env bash
# A two-node kind cluster (a control plane and a worker, both running pods) with our
# images loaded and the chart installed as shipped, ready for `kubectl apply -f` of a job.
# The CPU example (manifests/examples/cpu-ddp-2x1.yaml) trains across the two nodes:
# its checkpoint claim is bound to one host directory mounted into both nodes.
#
#   hack/kind.sh up      create (or reuse) the cluster, load the images, install the chart;
#                        prints `export KUBECONFIG=...` on stdout (make kind-up)
#   hack/kind.sh down    delete the cluster and undo what `up` did to this machine: the
#                        Docker engine it started, the empty /lib/modules it made (make kind-down)
#   hack/kind.sh print   the kind config, helm values and objects `up` uses (no Docker)
#   hack/kind.sh registry HOST:PORT
#                        let both nodes pull from the registry on this machine at HOST:PORT
#                        (localhost or 127.0.0.1, as `make push`/`make release` named it):
#                        a containerd hosts.toml in each node sends those pulls, over plain
#                        HTTP, to this machine's address on kind's network (the nodes'
#                        default gateway); the registry must listen there too (0.0.0.0)
#
# Where the images come from (DISTTRAIN_KIND_IMAGES):
#   registry  kind's own node image (kindest/node, pulled), our two images built with
#             `docker build` and loaded with `kind load docker-image`, kind's default CNI.
#             The default when a Docker engine answers (docker info).
#   local     no registry at all: the node image from hack/kind/node-image.sh, our images
#             from hack/images.sh streamed into each node's containerd, and a pod network
#             set up by this script (kindnet's image cannot be built here: a route per node
#             to the other node's pod range, ptp veths). The default when no engine answers
#             and Debian's dockerd is installed: hack/kind/dockerd.sh starts one of ours.
#
# Knobs: DISTTRAIN_KIND_NAME (disttrain), DOCKER_BUILD_ARGS (registry: extra `docker
# build` flags, e.g. --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu).
set -Eeuo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
NAME=${DISTTRAIN_KIND_NAME:-disttrain}
STATE=$CACHE/kind/$NAME
KUBECONFIG=$STATE/kubeconfig
export KUBECONFIG
VOLUMES=$STATE/volumes                  # on this machine; /var/local/disttrain in both nodes
CLAIM=cpu-ddp-checkpoints               # the claim the CPU example names
NETWORK_SUBNET=198.19.255.0/24          # kind's Docker network here (RFC 2544: routed nowhere)

log() { printf '[kind %s] %s\n' "$NAME" "$*" >&2; }
# timed STEP CMD...: run CMD, then log how long STEP took (the costs in docs/local-cluster.md)
timed() {
  local step=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  ((rc)) || log "$step: $((SECONDS - start))s"
  return "$rc"
}
die() { log "ERROR: $*"; exit 1; }
# any other failure says where it happened (set -E: inside functions too)
trap 'log "ERROR: line $LINENO: $BASH_COMMAND exited $?"' ERR

# "ghcr.io/disttrain/operator:0.1.0" etc., as hack/images.sh names them
image() { bash "$HACK/images.sh" names | awk -v t="/$1:" 'index($1, t) {print $1}'; }

mode() {
  if [[ -n ${DISTTRAIN_KIND_IMAGES:-} ]]; then
    [[ $DISTTRAIN_KIND_IMAGES == registry || $DISTTRAIN_KIND_IMAGES == local ]] \
      || die "DISTTRAIN_KIND_IMAGES=$DISTTRAIN_KIND_IMAGES: use registry or local"
    echo "$DISTTRAIN_KIND_IMAGES"
  elif [[ -f $STATE/engine ]] || ! docker info >/dev/null 2>&1; then
    echo local
  else
    echo registry
  fi
}

config() { # mode
  local image=''
  [[ $1 == local ]] && image="  image: $(bash "$HACK/kind/node-image.sh" name)"
  cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: $([[ $1 == local ]] && echo true || echo false)
# Kubelets refuse cgroup v1 hosts unless told not to; containerd inside a node may not
# lower OOM scores below its own (harmless where it could).
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
containerdConfigPatches:
- |
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
nodes:
EOF
  local role
  for role in control-plane worker; do
    echo "- role: $role"
    [[ -z $image ]] || echo "$image"
    cat <<EOF
  extraMounts:
  - {hostPath: $VOLUMES, containerPath: /var/local/disttrain}
EOF
  done
}

values() {
  local operator
  operator=$(image operator)
  cat <<EOF
# helm values for kind: the operator image just loaded (never pulled)
image: {repository: ${operator%:*}, tag: "${operator##*:}", pullPolicy: Never}
EOF
}

objects() { bash "$HACK/local-volumes.sh" -n default --claim "$CLAIM" "/var/local/disttrain/$CLAIM"; }

nodes() { kind get nodes --name "$NAME" | sort; }

# Docker: the engine that answers, else one of ours (recorded, so `down` stops it).
engine() {
  if [[ ! -f $STATE/engine ]] && docker info >/dev/null 2>&1; then return; fi
  bash "$HACK/kind/dockerd.sh" up >/dev/null
  DOCKER_HOST=$(bash "$HACK/kind/dockerd.sh" host)
  export DOCKER_HOST
  echo ours >"$STATE/engine"
}

# kind mounts /lib/modules into its nodes; a machine without one gets an empty one for
# as long as the cluster lives (removed by `down`).
lib_modules() {
  [[ -e /lib/modules ]] && return
  mkdir /lib/modules
  touch "$STATE/made-lib-modules"
}

# local: each node's pods get a ptp veth and an address from the node's podCIDR; each node
# routes the other nodes' ranges to them over kind's network (what kindnet would do).
pod_network() {
  local node cidr ip other
  declare -A CIDR=() IP=()
  for node in $(nodes); do
    cidr=$(kubectl get node "$node" -o jsonpath='{.spec.podCIDR}')
    ip=$(kubectl get node "$node" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
    [[ -n $cidr && -n $ip ]] || die "node $node has no podCIDR or InternalIP yet"
    CIDR[$node]=$cidr IP[$node]=$ip
  done
  for node in "${!CIDR[@]}"; do
    docker exec -i "$node" sh -c 'mkdir -p /etc/cni/net.d && cat >/etc/cni/net.d/10-disttrain.conflist' <<EOF
{"cniVersion": "1.0.0", "name": "disttrain", "plugins": [
  {"type": "ptp", "mtu": 1500, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "${CIDR[$node]}"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
    docker exec "$node" sysctl -qw net.ipv4.ip_forward=1
    for other in "${!CIDR[@]}"; do
      [[ $other == "$node" ]] || docker exec "$node" ip route replace "${CIDR[$other]}" via "${IP[$other]}"
    done
  done
}

# local: stream each image from buildah's storage into every node's containerd, unless
# the node has that very image (its ID) already.
load_local() {
  local name id node
  bash "$HACK/images.sh" build
  for name in $(image operator) $(image trainer); do
    id=$(bash "$HACK/images.sh" id "$name")
    for node in $(nodes); do
      if [[ $(docker exec "$node" crictl inspecti -o go-template --template '{{.status.id}}' "$name" 2>/dev/null || true) == "sha256:$id" ]]; then
        log "$name: present on $node"
        continue
      fi
      log "$name: loading into $node"
      bash "$HACK/images.sh" stream "$name" \
        | docker exec -i "$node" ctr -n k8s.io images import --local --digests --snapshotter overlayfs \
          --discard-unpacked-layers - >/dev/null \
        || die "loading $name into $node failed"
    done
  done
}

load_registry() {
  local target name args extra
  for target in operator trainer; do
    name=$(image "$target")
    log "docker build --target $target -> $name"
    read -ra args <<<"$(bash "$HACK/images.sh" build-args)"
    read -ra extra <<<"${DOCKER_BUILD_ARGS:-}"
    docker build --target "$target" "${args[@]}" "${extra[@]}" -t "$name" "$ROOT" >&2
    kind load docker-image --name "$NAME" "$name" >&2
  done
}

up() {
  local tool mode start=$SECONDS
  for tool in kind kubectl helm; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH (bash hack/build-tools.sh builds all three; add its --print-bin to PATH)"
  done
  mkdir -p "$STATE" "$VOLUMES/$CLAIM"
  chown 1000:1000 "$VOLUMES/$CLAIM" 2>/dev/null || chmod 0777 "$VOLUMES/$CLAIM"
  mode=$(mode)
  [[ $mode == local ]] && timed "docker engine" engine
  command -v docker >/dev/null && docker info >/dev/null 2>&1 || die "no Docker engine answers (docs/local-cluster.md, kind)"
  [[ $mode == local ]] && timed "node image" bash "$HACK/kind/node-image.sh" build
  lib_modules
  if kind get clusters 2>/dev/null | grep -qx "$NAME"; then
    kind export kubeconfig --name "$NAME" --kubeconfig "$KUBECONFIG" >&2
  else
    if [[ $mode == local ]] && ! docker network inspect kind >/dev/null 2>&1; then
      docker network create -d bridge --subnet "$NETWORK_SUBNET" \
        -o com.docker.network.bridge.name=dtkind0 -o com.docker.network.bridge.enable_ip_masquerade=false kind >/dev/null
    fi
    log "kind create cluster ($mode images)"
    timed "kind create cluster" kind create cluster --name "$NAME" --config <(config "$mode") --kubeconfig "$KUBECONFIG" >&2 \
      || die "kind create cluster failed (kind export logs --name $NAME shows the nodes' logs)"
  fi
  [[ $mode == local ]] && pod_network
  # both nodes run pods: a job's workers land on different nodes
  kubectl taint nodes "$NAME-control-plane" node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
  kubectl wait nodes --all --for=condition=Ready --timeout=5m >&2
  if [[ $mode == local ]]; then timed "our images" load_local; else timed "our images" load_registry; fi
  log "helm install disttrain charts/disttrain"
  timed "helm install" helm upgrade --install disttrain "$ROOT/charts/disttrain" -n disttrain-system --create-namespace \
    -f <(values) --wait --timeout 5m >&2
  objects | kubectl apply -f - >&2
  log "ready in $((SECONDS - start))s: kubectl apply -f manifests/examples/cpu-ddp-2x1.yaml trains across both nodes"
  echo "export KUBECONFIG=$KUBECONFIG"
}

# registry HOST:PORT: each node's pulls of HOST:PORT/... go to this machine (hosts.toml is
# read on every pull: no restart).
registry() {
  local host=${1:-} port node gateway
  [[ $host =~ ^(localhost|127\.0\.0\.1):[0-9]+$ ]] \
    || die "registry ${host:-(none)}: give the registry on this machine as localhost:PORT or 127.0.0.1:PORT, the name make release REGISTRY=... pushed to"
  port=${host##*:}
  [[ -f $STATE/engine ]] && DOCKER_HOST=$(bash "$HACK/kind/dockerd.sh" host) && export DOCKER_HOST
  kind get clusters 2>/dev/null | grep -qx "$NAME" || die "no kind cluster $NAME: run make kind-up first"
  for node in $(nodes); do
    gateway=$(docker exec "$node" ip -4 route show default | awk '{print $3; exit}')
    [[ -n $gateway ]] || die "node $node has no default route to this machine"
    docker exec -i "$node" sh -c "mkdir -p /etc/containerd/certs.d/$host && cat >/etc/containerd/certs.d/$host/hosts.toml" <<EOF
server = "http://$gateway:$port"

[host."http://$gateway:$port"]
  capabilities = ["pull", "resolve"]
EOF
    log "$node pulls $host/... from http://$gateway:$port"
  done
}

down() {
  [[ -f $STATE/engine ]] && DOCKER_HOST=$(bash "$HACK/kind/dockerd.sh" host) && export DOCKER_HOST
  if command -v kind >/dev/null && docker info >/dev/null 2>&1; then
    kind delete cluster --name "$NAME" >&2 || true
  fi
  if [[ -f $STATE/engine ]]; then
    bash "$HACK/kind/dockerd.sh" down
    rm -f "$STATE/engine"
  fi
  if [[ -f $STATE/made-lib-modules ]]; then
    rmdir /lib/modules 2>/dev/null || log "/lib/modules is not empty any more: left in place"
    rm -f "$STATE/made-lib-modules"
  fi
  rm -rf "$VOLUMES" "$KUBECONFIG"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  print) echo "# kind config ($(mode) images)"; config "$(mode)"; echo "# values.yaml"; values; echo "# objects"; objects ;;
  registry) registry "${2:-}" ;;
  *) echo "usage: $0 [up|down|print|registry HOST:PORT]" >&2; exit 2 ;;
esac
