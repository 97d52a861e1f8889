#!/usr/bin/env bash
# A real node beside hack/cluster.sh's control plane: containerd 2 + runc, a
# CNI bridge on a subnet that exists only on this machine, CoreDNS for the
# cluster zone only, and a kubelet, all built by hack/build-tools.sh; our
# images from hack/images.sh. hack/cluster.sh calls it when
# DISTTRAIN_REAL_NODE=1; it is not meant to be run alone.
#
#   hack/node.sh up     STATE  start the node for the cluster whose state dir is STATE
#   hack/node.sh down   STATE  stop it and undo every change it made to the host
#   hack/node.sh status STATE  exit 0 when its processes are alive
#   hack/node.sh sweep         remove what any earlier run left behind (bridges
#                              dtbr-*, iptables chains DISTTRAIN-* and kubelet's,
#                              cgroups disttrain-*, mounts and processes) whose
#                              cluster is no longer up
#
# Network (docs/local-cluster.md, "The real node"):
#   - bridge dtbr-<hash> with 198.18.N.1/24 (RFC 2544 benchmarking space: never
#     routed anywhere, so it cannot collide with or reach a real network); pods
#     get 198.18.N.10-250 and one route, to the Service range via the bridge:
#     no default route, and forwarding out of the bridge is dropped;
#   - the API server keeps listening on 127.0.0.1 only: one DNAT rule sends
#     pod traffic for the `kubernetes` Service (10.96.0.1:443) to it
#     (route_localnet on our bridge alone). No kube-proxy: nothing else needs a
#     ClusterIP (workers use the headless Service's DNS names, Prometheus
#     scrapes pod IPs);
#   - CoreDNS answers cluster.local on the bridge address and forwards nothing;
#   - the kubelet serves on the bridge address (the API server reaches it for
#     logs/exec with --kubelet-preferred-address-types=InternalIP).
# Host state it changes, all undone by `down` (and by `sweep` after a kill):
# the bridge, a filter and a nat chain DISTTRAIN-<hash>, kubelet's own chains
# (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT), net.ipv4.ip_forward
# (restored), cgroups /disttrain-<name> in every hierarchy, the mounts under the
# state dir, /var/log/containers links into it.
# containerd's root (images, snapshots) is kept in ${DISTTRAIN_CACHE}/node/ so
# imported images survive; one real node runs at a time per cache (a lock).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
CMD=${1:-}
STATE=${2:-}
SERVICE_IP=10.96.0.1
CNI_BIN=/usr/lib/cni
NODE_NAME=disttrain-node

log() { printf '[node] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=hack/lib/procs.sh
source "$HACK/lib/procs.sh"

# --- names derived from the cluster ------------------------------------------

load_names() {
  [[ -n $STATE ]] || die "usage: $0 up|down|status STATE"
  NAME=$(basename "$STATE")
  NODE=$STATE/node
  HASH=$(printf '%s' "$STATE" | sha256sum | cut -c1-8)
  BRIDGE=dtbr-$HASH
  CHAIN=DISTTRAIN-$HASH
  CGROUP=disttrain-$NAME
  SOCK=$NODE/containerd.sock
  CROOT=$CACHE/node/containerd
}

cgroup_hierarchies() {
  awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts | grep '^/sys/fs/cgroup/'
}

# --- host changes: bridge, iptables, cgroups, mounts ---------------------------

pick_subnet() {
  local n=$((16#${HASH:0:2})) i
  for ((i = 0; i < 256; i++)); do
    if ! ip -4 addr show | grep -q "inet 198\.18\.$n\."; then
      echo "$n"
      return
    fi
    n=$(((n + 1) % 256))
  done
  die "no free 198.18.N.0/24 subnet"
}

net_up() {
  local n
  n=$(pick_subnet)
  NODE_IP=198.18.$n.1
  SUBNET=198.18.$n.0/24
  printf 'NODE_IP=%s\nSUBNET=%s\nBRIDGE=%s\nFORWARD=%s\n' "$NODE_IP" "$SUBNET" "$BRIDGE" \
    "$(cat /proc/sys/net/ipv4/ip_forward)" >"$NODE/net.env"
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # DNAT to 127.0.0.1 needs route_localnet on the interface the packet came in on.
  sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
  local api_port
  api_port=$(sed -n 's/^apiserver=//p' "$STATE/ports")
  iptables -w -t nat -N "$CHAIN"
  iptables -w -t nat -A "$CHAIN" -d "$SERVICE_IP/32" -p tcp --dport 443 \
    -j DNAT --to-destination "127.0.0.1:$api_port"
  iptables -w -t nat -A PREROUTING -i "$BRIDGE" -m comment --comment "disttrain $NAME" -j "$CHAIN"
  # Pods talk to each other and to this host, never through it.
  iptables -w -N "$CHAIN"
  iptables -w -A "$CHAIN" -o "$BRIDGE" -j ACCEPT
  iptables -w -A "$CHAIN" -j DROP
  iptables -w -I FORWARD -i "$BRIDGE" -m comment --comment "disttrain $NAME" -j "$CHAIN"
}

# Remove one of our chains from TABLE, with every rule that jumps to it.
drop_chain() {
  local cmd=$1 table=$2 chain=$3 rule
  local rules
  rules=$("$cmd" -w -t "$table" -S 2>/dev/null | grep -- "-j $chain\( \|$\)" || true)
  while read -r rule; do
    [[ -n $rule ]] || continue
    eval "$cmd -w -t $table ${rule/-A /-D }" 2>/dev/null || true
  done <<<"$rules"
  "$cmd" -w -t "$table" -F "$chain" 2>/dev/null || true
  "$cmd" -w -t "$table" -X "$chain" 2>/dev/null || true
}

# kubelet's chains exist once per host, not per node: drop them only when no
# other kubelet runs.
drop_kubelet_chains() {
  local pid
  # (a kubelet we just killed may linger as a zombie: PID 1 here may not reap it)
  for pid in $(pgrep -x kubelet); do
    running "$pid" || continue
    log "another kubelet runs (pid $pid): its chains stay"
    return 0
  done
  local cmd table
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    drop_chain "$cmd" filter KUBE-FIREWALL
    for table in mangle nat filter; do drop_chain "$cmd" "$table" KUBE-KUBELET-CANARY; done
    drop_chain "$cmd" mangle KUBE-IPTABLES-HINT
  done
}

net_down() {
  local forward=""
  [[ -f $NODE/net.env ]] && forward=$(sed -n 's/^FORWARD=//p' "$NODE/net.env")
  ip link del "$BRIDGE" 2>/dev/null || true
  drop_chain iptables nat "$CHAIN"
  drop_chain iptables filter "$CHAIN"
  [[ -n $forward ]] && sysctl -qw "net.ipv4.ip_forward=$forward"
  return 0
}

cgroups_up() {
  local h
  for h in $(cgroup_hierarchies); do
    mkdir -p "$h/$CGROUP"
    if [[ -f $h/cpuset.cpus ]]; then
      cat "$h/cpuset.cpus" >"$h/$CGROUP/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$CGROUP/cpuset.mems"
    fi
  done
}

# cgroups_down NAME: kill what still runs in /NAME, then remove it bottom-up.
cgroups_down() {
  local group=$1 h d pids i
  for h in $(cgroup_hierarchies); do
    [[ -d $h/$group ]] || continue
    for ((i = 0; i < 50; i++)); do
      pids=$(find "$h/$group" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
      [[ -z $pids ]] && break
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
      sleep 0.1
    done
    find "$h/$group" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [[ -d $h/$group ]] && log "could not remove cgroup $h/$group"
  done
  return 0
}

# umount_under DIR...: every mount at or below each DIR, deepest first.
umount_under() {
  local dir m
  for dir in "$@"; do
    for m in $(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
  done
}

# --- configuration ---------------------------------------------------------------

write_configs() {
  local pki=$STATE/pki api_port kubelet_port health_port ready_port dns_metrics
  api_port=$(sed -n 's/^apiserver=//p' "$STATE/ports")
  read -r kubelet_port health_port ready_port dns_metrics KUBELET_HEALTH \
    <<<"$(PYTHONPATH="$HACK/../operator" python3 -m disttrain.local.ports 5)"
  printf 'kubelet=%s\nkubelet-healthz=%s\ncoredns-health=%s\ncoredns-ready=%s\n' \
    "$kubelet_port" "$KUBELET_HEALTH" "$health_port" "$ready_port" >>"$NODE/net.env"
  DNS_READY=$ready_port
  mkdir -p "$NODE/cni/net.d" "$NODE/cni/ipam" "$NODE/kubelet" "$NODE/pod-logs" "$CROOT"

  cat >"$NODE/containerd.toml" <<EOF
version = 3
root = '$CROOT'
state = '$NODE/containerd-state'
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt',
  'io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.erofs',
  'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = '$SOCK'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '$PAUSE_IMAGE'

# Per-registry settings (hosts.toml), read on every pull: a test's plain-HTTP registry.
[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = '$NODE/certs.d'

[plugins.'io.containerd.cri.v1.runtime']
  # root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = '$(command -v runc)'
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$CNI_BIN']
    conf_dir = '$NODE/cni/net.d'

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
EOF

  cat >"$NODE/cni/net.d/10-disttrain.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "disttrain",
  "plugins": [{
    "type": "bridge",
    "bridge": "$BRIDGE",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": "$NODE/cni/ipam",
      "ranges": [[{"subnet": "$SUBNET", "rangeStart": "${NODE_IP%.1}.10", "rangeEnd": "${NODE_IP%.1}.250", "gateway": "$NODE_IP"}]],
      "routes": [{"dst": "10.96.0.0/16"}]
    }
  }]
}
EOF

  # Pods resolve through CoreDNS only; nothing of the host's resolv.conf leaks in.
  printf 'options ndots:5\n' >"$NODE/resolv.conf"

  cat >"$NODE/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 {
  bind $NODE_IP
  errors
  health 127.0.0.1:$health_port
  ready 127.0.0.1:$ready_port
  kubernetes cluster.local in-addr.arpa {
    kubeconfig $NODE/coredns.kubeconfig
    pods insecure
  }
  cache 5
}
EOF

  cat >"$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM mounts cgroup v1 (hybrid); kubelet 1.37 runs there only when told to.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
containerRuntimeEndpoint: unix://$SOCK
address: $NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTH
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
resolvConf: $NODE/resolv.conf
podLogsDir: $NODE/pod-logs
# A shared CI machine: never evict or garbage-collect our images for disk.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
failSwapOn: false
serializeImagePulls: false
maxPods: 32
EOF
}

make_node_pki() {
  local pki=$STATE/pki
  (
    cd "$pki"
    ossl() { openssl "$@" 2>/dev/null; }
    sign() { # NAME SUBJ
      ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"
      ossl req -new -key "$1.key" -subj "$2" -out "$1.csr"
      printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$1.ext"
      ossl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt"
      rm -f "$1.csr" "$1.ext"
    }
    sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
    sign coredns "/CN=disttrain:coredns"
  ) || die "openssl failed"
  local api_port
  api_port=$(sed -n 's/^apiserver=//p' "$STATE/ports")
  kubeconfig_for kubelet "$NODE/kubelet.kubeconfig" "$api_port"
  kubeconfig_for coredns "$NODE/coredns.kubeconfig" "$api_port"
}

kubeconfig_for() { # CERT FILE PORT
  cat >"$2" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$3
    certificate-authority-data: $(base64 -w0 "$STATE/pki/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 "$STATE/pki/$1.crt")
    client-key-data: $(base64 -w0 "$STATE/pki/$1.key")
contexts:
- name: local
  context: {cluster: local, user: $1}
current-context: local
EOF
  chmod 600 "$2"
}

# CoreDNS reads Services, EndpointSlices, Namespaces and Pods: nothing more.
COREDNS_RBAC='
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "disttrain:coredns"}
rules:
- apiGroups: [""]
  resources: [services, namespaces, pods]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "disttrain:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "disttrain:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "disttrain:coredns"}
'

# --- processes ------------------------------------------------------------------

NODE_COMPONENTS=(node-containerd node-coredns node-kubelet)
WATCH=("${NODE_COMPONENTS[@]}")

wait_until() { # WHAT TIMEOUT COMMAND...
  local what=$1 timeout=$2
  shift 2
  poll_until $((SECONDS + timeout)) "$what" "$@"
}

ctr_() { "$BIN/ctr" --address "$SOCK" -n k8s.io "$@"; }

# Containers and sandboxes an earlier, killed run left in containerd's
# persistent metadata (their processes are gone).
forget_containers() {
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s KILL "$id" >/dev/null 2>&1 || true
    ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true
  done
  for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$id" >/dev/null 2>&1 || true; done
  for id in $(ctr_ sandboxes ls 2>/dev/null | awk 'NR > 1 {print $1}'); do ctr_ sandboxes rm -f "$id" >/dev/null 2>&1 || true; done
}

cmd_up() {
  load_names
  [[ $EUID == 0 ]] || die "the real node needs root (mounts, bridges, cgroups)"
  BIN=$(bash "$HACK/build-tools.sh" --print-bin)
  local tool
  for tool in kubelet containerd containerd-shim-runc-v2 ctr coredns; do
    [[ -x $BIN/$tool ]] || die "$BIN/$tool missing: run hack/build-tools.sh"
  done
  bash "$HACK/node/host-packages.sh"
  mkdir -p "$CACHE/node"
  exec 7>"$CACHE/node/lock"
  flock -n 7 || die "another real node runs on $CACHE (lock $CACHE/node/lock)"
  local start_s=$SECONDS
  export PATH="$BIN:$PATH" KUBECONFIG=$STATE/kubeconfig
  mkdir -p "$NODE"
  [[ -d /var/log/containers ]] || touch "$NODE/made-log-dir"
  PAUSE_IMAGE=$(bash "$HACK/images.sh" pause-name)
  net_up
  cgroups_up
  make_node_pki
  write_configs
  log "network $SUBNET on $BRIDGE, configs ready ($((SECONDS - start_s))s)"

  # containerd inherits the lock (fd 7) and holds it while it runs; nothing else may.
  start node-containerd containerd --config "$NODE/containerd.toml"
  wait_until "containerd" 30 "$BIN/ctr" --address "$SOCK" version
  forget_containers
  bash "$HACK/images.sh" import "$SOCK" "$CROOT/disttrain-imported" 7>&-
  log "containerd up, images in ($((SECONDS - start_s))s)"

  kubectl apply -f - >/dev/null <<<"$COREDNS_RBAC"
  start node-coredns coredns -conf "$NODE/Corefile" 7>&-
  start node-kubelet kubelet --config "$NODE/kubelet.yaml" --kubeconfig "$NODE/kubelet.kubeconfig" \
    --root-dir "$NODE/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --node-labels "disttrain.dev/real-node=true" --v=1 7>&-
  wait_until "coredns ready" 60 curl -sf "http://127.0.0.1:$DNS_READY/ready"
  wait_until "node Ready" 120 kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
  log "node $NODE_NAME Ready at $NODE_IP in $((SECONDS - start_s))s"
}

cmd_down() {
  load_names
  [[ -d $NODE ]] || return 0
  BIN=$(bash "$HACK/build-tools.sh" --print-bin)
  local pgids=() name pid
  # kubelet first (it would restart what we stop), then the pods' processes,
  # then containerd can forget them, then the daemons.
  pid=$(cat "$STATE/pids/node-kubelet.pid" 2>/dev/null) && kill_groups 10 "$pid"
  if alive node-containerd; then
    forget_containers
  fi
  cgroups_down "$CGROUP"
  kill_shims "$SOCK"
  for name in node-coredns node-containerd; do
    pid=$(cat "$STATE/pids/$name.pid" 2>/dev/null) && pgids+=("$pid")
  done
  kill_groups 10 "${pgids[@]}"
  rm -f "$STATE"/pids/node-*.pid
  umount_under "$NODE" "$CROOT/io.containerd.grpc.v1.cri/sandboxes"
  net_down
  drop_kubelet_chains
  # The shims' socket dir and runc's state root under containerd's default state
  # dir, and the kubelet's log link dir: removed when empty and made by this run.
  rmdir /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/s /run/containerd 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -type l -lname "$NODE/*" -delete 2>/dev/null || true
  if [[ -f $NODE/made-log-dir ]]; then rmdir /var/log/containers 2>/dev/null || true; fi
  kubectl --kubeconfig "$STATE/kubeconfig" delete node "$NODE_NAME" --wait=false >/dev/null 2>&1 || true
  rm -rf "$NODE"
  log "down: node $NODE_NAME stopped, host changes undone"
}

# kill_shims SOCKET: the runc shims serving this containerd (they daemonize,
# leaving containerd's process group).
kill_shims() {
  local f pid cmd pids=()
  for f in /proc/[0-9]*/cmdline; do
    { cmd=$(tr '\0' ' ' <"$f"); } 2>/dev/null || continue
    [[ $cmd == *containerd-shim-runc-v2*"-address $1 "* ]] || continue
    pid=${f#/proc/}
    pids+=("${pid%/cmdline}")
  done
  ((${#pids[@]})) || return 0
  kill -KILL "${pids[@]}" 2>/dev/null || true
  for pid in "${pids[@]}"; do
    while running "$pid"; do sleep 0.05; done
  done
}

cmd_status() {
  load_names
  local name ok=0
  for name in "${NODE_COMPONENTS[@]}"; do
    if alive "$name"; then log "$name: running"; else log "$name: NOT running"; ok=1; fi
  done
  return $ok
}

# sweep: what runs of killed clusters left on the host (their state dir is
# gone or their API server is dead).
cmd_sweep() {
  local br chain cmd table h group state
  for br in $(ip -o link show type bridge | awk -F': ' '{print $2}' | grep '^dtbr-' || true); do
    owner_alive "${br#dtbr-}" && continue
    ip link del "$br" && log "sweep: removed bridge $br"
  done
  for cmd in iptables; do
    for table in nat filter; do
      for chain in $("$cmd" -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DISTTRAIN-/ {print $2}'); do
        owner_alive "${chain#DISTTRAIN-}" && continue
        drop_chain "$cmd" "$table" "$chain" && log "sweep: removed $table chain $chain"
      done
    done
  done
  for h in $(cgroup_hierarchies); do
    for group in "$h"/disttrain-*; do
      [[ -d $group ]] || continue
      state=$CACHE/clusters/${group##*/disttrain-}
      [[ -d $state/node ]] && continue
      cgroups_down "${group##*/}"
    done
  done
  drop_kubelet_chains
  return 0
}

# owner_alive HASH: a cluster whose state dir hashes to HASH still has its node.
owner_alive() {
  local d
  for d in "$CACHE"/clusters/*/node; do
    [[ -d $d ]] || continue
    [[ $(printf '%s' "${d%/node}" | sha256sum | cut -c1-8) == "$1" ]] && return 0
  done
  return 1
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  sweep) cmd_sweep ;;
  *) echo "usage: $0 up|down|status STATE | sweep" >&2; exit 2 ;;
esac
