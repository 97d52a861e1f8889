#!/usr/bin/env bash
# A Docker engine of our own for kind, on machines that have Debian's docker.io but run no
# engine (these development machines). It touches nothing of the host's networking:
#
#   - its own socket, exec root and pid file under /run/disttrain-docker/ (DOCKER_HOST
#     points there; /var/run/docker.sock is never created), its data root (images, the
#     kind node image) under ${DISTTRAIN_CACHE}/kind/docker so loaded images survive;
#   - --iptables=false --ip-forward=false --ip-masq=false --bridge=none: no docker0, no
#     iptables rules, no sysctl change; kind's network is created by `up` with a bridge
#     named dtkind0, so `sweep` can find and remove it after a kill;
#   - cgroupfs, and as default runtime hack/kind/runc-without-sys-resource: a privileged
#     container (a kind node) asks for every capability and this machine's root lacks
#     CAP_SYS_RESOURCE in its bounding set.
#
#   hack/kind/dockerd.sh up      start it (no-op when running); prints DOCKER_HOST=...
#   hack/kind/dockerd.sh down    stop it and undo what it made: its containers, the
#                                dtkind0 bridge, mounts under its roots, /run/disttrain-docker
#   hack/kind/dockerd.sh host    print the DOCKER_HOST value
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
RUN=/run/disttrain-docker
DATA=$CACHE/kind/docker
SOCK=$RUN/docker.sock
BRIDGE=dtkind0
export DOCKER_HOST=unix://$SOCK

log() { printf '[kind dockerd] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

running() { [[ -f $RUN/dockerd.pid ]] && kill -0 "$(cat "$RUN/dockerd.pid")" 2>/dev/null && docker info >/dev/null 2>&1; }

up() {
  running && { echo "DOCKER_HOST=$DOCKER_HOST"; return; }
  command -v dockerd >/dev/null || die "dockerd not found: apt-get install docker.io (bash hack/node/host-packages.sh kind)"
  command -v docker >/dev/null || die "docker (the client) not found: apt-get install docker.io"
  [[ $EUID == 0 ]] || die "starting a Docker engine needs root"
  down_quietly
  mkdir -p "$RUN" "$DATA"
  log "starting dockerd (data root $DATA)"
  setsid dockerd --host "$DOCKER_HOST" --data-root "$DATA" --exec-root "$RUN/exec" \
    --pidfile "$RUN/dockerd.pid" --iptables=false --ip-forward=false --ip-masq=false \
    --bridge=none --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs \
    --add-runtime "disttrain-runc=$HACK/kind/runc-without-sys-resource" \
    --default-runtime disttrain-runc >"$RUN/dockerd.log" 2>&1 </dev/null &
  local i
  for i in $(seq 120); do
    docker info >/dev/null 2>&1 && break
    kill -0 $! 2>/dev/null || die "dockerd exited: $(tail -n 5 "$RUN/dockerd.log")"
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || die "dockerd did not answer in 60 s: $(tail -n 5 "$RUN/dockerd.log")"
  # Containers in a freshly started engine are left from a session that is over (a kind
  # node does not outlive its engine; a `docker run` of a killed kind-up may even land
  # after kind-down removed the rest): so kind never takes a dead node for a cluster to reuse.
  remove_containers
  echo "DOCKER_HOST=$DOCKER_HOST"
}

# Every container of this engine, kind's network, and the nodes' /var volumes (also of
# containers a killed `kind create` left half-made).
remove_containers() {
  # shellcheck disable=SC2046
  docker rm -f -v $(docker ps -aq) >/dev/null 2>&1 || true
  docker network rm kind >/dev/null 2>&1 || true
  docker volume prune -f >/dev/null 2>&1 || true
}

# Stop dockerd (its containerd and shims go with it) and remove what outlives it.
down_quietly() {
  local pid m
  if [[ -f $RUN/dockerd.pid ]] && pid=$(cat "$RUN/dockerd.pid") && kill -0 "$pid" 2>/dev/null; then
    docker info >/dev/null 2>&1 && remove_containers
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  # containerd and shims of a dockerd that was killed
  for pid in $(pgrep -f -- "$RUN/exec" || true); do kill -9 "$pid" 2>/dev/null || true; done
  for m in $(awk -v a="$RUN/" -v b="$DATA/" 'index($2, a) == 1 || index($2, b) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE" 2>/dev/null || true
  rm -rf "$RUN"
}

case "${1:-}" in
  up) up ;;
  down) down_quietly; log "stopped; nothing of it left running" ;;
  host) echo "$DOCKER_HOST" ;;
  *) echo "usage: $0 up|down|host" >&2; exit 2 ;;
esac
