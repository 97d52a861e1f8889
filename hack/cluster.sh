#!/usr/bin/env bash
# A local Kubernetes control plane with fake GPU nodes, from plain processes:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a KWOK
# controller, all built by hack/build-tools.sh. No Docker. With
# DISTTRAIN_REAL_NODE=1 a real node joins too (hack/node.sh: kubelet,
# containerd, CNI bridge, CoreDNS, our images; root only).
#
#   hack/cluster.sh up     [NAME]  start (or report) cluster NAME; prints
#                                  `export KUBECONFIG=...` on stdout
#   hack/cluster.sh down   [NAME]  stop every process and remove its state
#   hack/cluster.sh status [NAME]  exit 0 when all processes are alive
#   hack/cluster.sh env    [NAME]  print `export KUBECONFIG=...`
#
# NAME defaults to $DISTTRAIN_CLUSTER_NAME or "default". State (certs, etcd
# data, logs, pids, kubeconfigs) lives in $DISTTRAIN_CLUSTER_DIR, default
# ${DISTTRAIN_CACHE:-~/.cache/disttrain}/clusters/NAME. Ports are picked free
# at start, so several clusters run side by side.
#
# Knobs: DISTTRAIN_FAKE_GPU_NODES (4), DISTTRAIN_FAKE_GPUS_PER_NODE (8),
# DISTTRAIN_FAKE_CPU_NODES (2), DISTTRAIN_CLUSTER_TIMEOUT (90 s to ready),
# DISTTRAIN_CLUSTER_OWNER_PID (when set, a reaper runs `down` as soon as that
# process exits, so a killed test run leaves nothing behind),
# DISTTRAIN_REAL_NODE (1: add the real node; 0 fake nodes of a kind skip them),
# DISTTRAIN_AUDIT_POLICY (an audit policy file: the API server writes its audit
# log to STATE/audit.log; bench/operator_scale.py counts writes by user with it),
# DISTTRAIN_FEATURE_GATES (e.g. GenericWorkload=true: --feature-gates for the API
# server, scheduler and controller manager alike, which must agree; with
# GenericWorkload=true the API server also serves scheduling.k8s.io/v1beta1, the
# PodGroups kube-scheduler gang-schedules; unset: each component's defaults).
# `down` returns only when every process it started has exited. KWOK renews
# each fake node's Lease (--node-lease-duration-seconds): the node lifecycle
# controller reads node health from those Leases, and KWOK writes node status
# only every 10-20 minutes. Without the Leases every fake node turned Unknown 5
# minutes into a session and the controller marked its pods NotReady, which
# nothing undoes (KWOK's pod-ready stage acts on Pending pods only), so a test
# that needs a Ready pod (the operator asks only Ready workers for /status)
# failed at random. A node is marked NotReady only after 5 minutes without a
# renewal (the default 50 s lapses on a loaded 2-core machine).
#
# Pod behaviour on the fake nodes (hack/cluster/kwok-stages.yaml): pods become
# Running; annotation disttrain.dev/test-exit-code: "N" terminates them with
# exit code N (Succeeded if 0, else Failed); disttrain.dev/test-pod-ip sets
# status.podIP. See docs/local-cluster.md.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
CMD=${1:-}
NAME=${2:-${DISTTRAIN_CLUSTER_NAME:-default}}
[[ "$NAME" =~ ^[a-z0-9][a-z0-9-]*$ ]] || { echo "bad cluster name: $NAME" >&2; exit 2; }
STATE=${DISTTRAIN_CLUSTER_DIR:-$CACHE/clusters/$NAME}
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
# The fake nodes' InternalIP, where KWOK stands in for their kubelets (a loopback address).
FAKE_NODE_IP=127.240.0.1

log() { printf '[cluster %s] %s\n' "$NAME" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=hack/lib/procs.sh
source "$HACK/lib/procs.sh"
WATCH=("${COMPONENTS[@]}")

# Stop the real node (if any), then each component's process group: TERM in
# reverse start order, KILL whatever is left after 3 s, and return only once
# every process is gone (etcd's port, its data dir). `down` removes the state
# anyway, so there is nothing to shut down gracefully for.
stop_all() {
  [[ -d "$STATE/node" ]] && bash "$HACK/node.sh" down "$STATE"
  local name pid pids=()
  local order=(reaper kwok kube-scheduler kube-controller-manager kube-apiserver etcd)
  for name in "${order[@]}"; do
    pid=$(cat "$STATE/pids/$name.pid" 2>/dev/null) || continue
    [[ "$pid" =~ ^[0-9]+$ ]] && pids+=("$pid")
  done
  kill_groups 3 "${pids[@]}"
}

cmd_down() {
  if [[ -d "$STATE" ]]; then
    stop_all
    rm -rf "$STATE"
    log "down: stopped and removed $STATE"
  else
    log "down: nothing at $STATE"
  fi
}

cmd_status() {
  local name ok=0
  for name in "${COMPONENTS[@]}"; do
    if alive "$name"; then log "$name: running"; else log "$name: NOT running"; ok=1; fi
  done
  if [[ -d "$STATE/node" ]]; then bash "$HACK/node.sh" status "$STATE" || ok=1; fi
  return $ok
}

cmd_env() { echo "export KUBECONFIG=$STATE/kubeconfig"; }

# free_ports N [ADDRESS]: N distinct TCP ports free on a loopback address (127.0.0.1), drawn
# outside the kernel's ephemeral range so that no outgoing connection takes one before our
# server binds it (operator/disttrain/local/ports.py says why).
free_ports() {
  PYTHONPATH="$HACK/../operator" python3 -m disttrain.local.ports "$1" "${2:-127.0.0.1}"
}

# kubeconfig FILE USER [--cert NAME | --token TOKEN]
write_kubeconfig() {
  local file=$1 user=$2 kind=$3 value=$4 cred
  if [[ $kind == --cert ]]; then
    cred="    client-certificate-data: $(base64 -w0 "$STATE/pki/$value.crt")
    client-key-data: $(base64 -w0 "$STATE/pki/$value.key")"
  else
    cred="    token: $value"
  fi
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: disttrain-$NAME
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$STATE/pki/ca.crt")
users:
- name: $user
  user:
$cred
contexts:
- name: disttrain-$NAME
  context:
    cluster: disttrain-$NAME
    user: $user
current-context: disttrain-$NAME
EOF
  chmod 600 "$file"
}

make_pki() {
  local pki=$STATE/pki
  mkdir -p "$pki"
  (
    cd "$pki"
    ossl() { openssl "$@" 2>/dev/null; }
    newkey() { ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
    newkey ca
    ossl req -x509 -new -key ca.key -days 3650 -subj "/CN=disttrain-$NAME-ca" -out ca.crt
    # sign NAME SUBJ EXT
    sign() {
      newkey "$1"
      ossl req -new -key "$1.key" -subj "$2" -out "$1.csr"
      printf '%s\n' "$3" >"$1.ext"
      ossl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$1.ext" -out "$1.crt"
      rm -f "$1.csr" "$1.ext"
    }
    local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    sign apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" "$client"
    sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign admin "/O=system:masters/CN=disttrain-admin" "$client"
    sign controller-manager "/CN=system:kube-controller-manager" "$client"
    sign scheduler "/CN=system:kube-scheduler" "$client"
    sign kwok "/O=system:masters/CN=kwok-controller" "$client"
    # Service-account token signing key pair.
    ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
    ossl pkey -in sa.key -pubout -out sa.pub
  ) || die "openssl failed making $pki"
}

fake_nodes() {
  local gpu_nodes=${DISTTRAIN_FAKE_GPU_NODES:-4} gpus=${DISTTRAIN_FAKE_GPUS_PER_NODE:-8}
  local cpu_nodes=${DISTTRAIN_FAKE_CPU_NODES:-2} i
  node() { # name kind cpu memory gpus
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
    type: kwok
    disttrain.dev/fake-node: $2
EOF
    if [[ $5 != 0 ]]; then
      cat <<EOF
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.count: "$5"
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
EOF
    fi
    cat <<EOF
spec: {}
status:
  capacity: &cap
    cpu: "$3"
    memory: $4
    ephemeral-storage: 1Ti
    pods: "110"
EOF
    [[ $5 != 0 ]] && echo "    nvidia.com/gpu: \"$5\""
    cat <<EOF
  allocatable: *cap
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: fake
EOF
  }
  for ((i = 0; i < gpu_nodes; i++)); do node "kwok-gpu-$i" gpu 96 2Ti "$gpus"; done
  for ((i = 0; i < cpu_nodes; i++)); do node "kwok-cpu-$i" cpu 32 128Gi 0; done
}

cmd_up() {
  local start_s=$SECONDS timeout=${DISTTRAIN_CLUSTER_TIMEOUT:-90}
  if [[ -f "$STATE/kubeconfig" ]] && cmd_status 2>/dev/null; then
    log "already up"
    cmd_env
    return
  fi
  [[ -d "$STATE" ]] && { log "removing stale state in $STATE"; cmd_down; }

  local bin
  bin=$(bash "$HACK/build-tools.sh" --print-bin)
  # Only what this cluster runs (etcd, the control plane, KWOK), not `make tools`' whole set.
  if ! [[ -x $bin/etcd && -x $bin/kube-apiserver && -x $bin/kwok ]] && ! bash "$HACK/build-tools.sh" --check; then
    log "first building etcd, Kubernetes and KWOK from their Go modules: about 20 min on 2 cores with empty Go" \
        "caches (docs/local-cluster.md); later runs reuse them"
  fi
  bash "$HACK/build-tools.sh" --check || bash "$HACK/build-tools.sh" --only etcd kubernetes kwok \
    || die "tool build failed"
  export PATH="$bin:$PATH"
  local tool
  for tool in openssl curl python3 setsid; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH"
  done

  mkdir -p "$STATE"/{logs,pids,etcd}
  # Up to here nothing runs; from here on a failure must not leave processes.
  trap 'rc=$?; if ((rc)); then log "up failed; logs kept in $STATE/logs"; stop_all; fi' EXIT
  # The reaper starts before anything else: an owner killed while `up` still runs (its
  # processes outlive it, each in its own session) must not leave a half-started cluster.
  if [[ -n "${DISTTRAIN_CLUSTER_OWNER_PID:-}" ]]; then
    setsid bash "$HACK/cluster.sh" _reap "$NAME" "$DISTTRAIN_CLUSTER_OWNER_PID" $$ </dev/null \
      >"$STATE/logs/reaper.log" 2>&1 &
    echo $! >"$STATE/pids/reaper.pid"
  fi

  read -r ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT SCHED_PORT <<<"$(free_ports 5)"
  # KWOK listens on the fake nodes' address, where the API server asks for their pods' logs.
  KWOK_PORT=$(free_ports 1 "$FAKE_NODE_IP")
  printf 'etcd=%s\napiserver=%s\ncontroller-manager=%s\nscheduler=%s\nkwok=%s\n' \
    "$ETCD_PORT" "$API_PORT" "$KCM_PORT" "$SCHED_PORT" "$KWOK_PORT" >"$STATE/ports"
  make_pki
  local pki=$STATE/pki
  # DISTTRAIN_FEATURE_GATES: one --feature-gates for all three; the GenericWorkload API is off by default.
  local gates=() runtime=()
  if [[ -n ${DISTTRAIN_FEATURE_GATES:-} ]]; then
    gates=(--feature-gates "$DISTTRAIN_FEATURE_GATES")
    [[ ,$DISTTRAIN_FEATURE_GATES, == *,GenericWorkload=true,* ]] \
      && runtime=(--runtime-config scheduling.k8s.io/v1beta1=true)
    log "feature gates: $DISTTRAIN_FEATURE_GATES"
  fi
  write_kubeconfig "$STATE/kubeconfig" disttrain-admin --cert admin
  write_kubeconfig "$STATE/controller-manager.kubeconfig" kube-controller-manager --cert controller-manager
  write_kubeconfig "$STATE/scheduler.kubeconfig" kube-scheduler --cert scheduler
  write_kubeconfig "$STATE/kwok.kubeconfig" kwok --cert kwok
  log "pki and kubeconfigs ready ($((SECONDS - start_s))s); apiserver https://127.0.0.1:$API_PORT"

  start etcd etcd --name "disttrain-$NAME" --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "disttrain-$NAME=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn

  start kube-apiserver kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --endpoint-reconciler-type none \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --allow-privileged=true --profiling=false \
    --enable-priority-and-fairness=false \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    ${DISTTRAIN_AUDIT_POLICY:+--audit-policy-file "$DISTTRAIN_AUDIT_POLICY" --audit-log-path "$STATE/audit.log" --audit-log-format json --audit-log-mode blocking} \
    "${gates[@]}" "${runtime[@]}" --v=1

  export KUBECONFIG=$STATE/kubeconfig
  local deadline=$((SECONDS + timeout))
  # wait_for WHAT COMMAND...: poll until COMMAND succeeds or the deadline
  wait_for() {
    local what=$1
    shift
    poll_until "$deadline" "$what" "$@"
    log "$what ($((SECONDS - start_s))s)"
  }
  # The others need the RBAC bootstrap policy: start them once it is ready.
  wait_for "apiserver ready" kubectl get --raw /readyz

  start kube-controller-manager kube-controller-manager \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
    --service-account-private-key-file "$pki/sa.key" \
    --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --use-service-account-credentials=true \
    --leader-elect=false --profiling=false \
    --cluster-name "disttrain-$NAME" \
    --node-monitor-grace-period 5m \
    "${gates[@]}" --v=1

  start kube-scheduler kube-scheduler \
    --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" \
    --leader-elect=false --profiling=false \
    "${gates[@]}" --v=1

  # A fake pod's log is the file its KWOK Logs object names (docs/local-cluster.md): KWOK
  # serves it as a kubelet would, on the nodes' address and port (--node-port), which the API
  # server reads from each node's status.
  local kwok_bin
  kwok_bin=$(dirname "$(command -v kwok)")
  kubectl apply -f "$kwok_bin/logs.kwok.x-k8s.io.yaml" -f "$kwok_bin/clusterlogs.kwok.x-k8s.io.yaml" >/dev/null \
    || die "installing KWOK's Logs CRDs failed"
  wait_for "KWOK Logs CRDs established" kubectl wait --for=condition=Established --timeout=1s \
    crd/logs.kwok.x-k8s.io crd/clusterlogs.kwok.x-k8s.io

  # KWOK_WORKDIR: don't merge a user's ~/.kwok/kwok.yaml into our stages.
  start kwok env KWOK_WORKDIR="$STATE/kwok" kwok --config "$HACK/cluster/kwok-stages.yaml" \
    --kubeconfig "$STATE/kwok.kubeconfig" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --server-address "$FAKE_NODE_IP:$KWOK_PORT" --node-port "$KWOK_PORT" \
    --enable-crds Logs,ClusterLogs \
    --cidr 127.244.0.1/16 --node-ip "$FAKE_NODE_IP" \
    --node-lease-duration-seconds 40

  local fakes
  fakes=$(fake_nodes)
  if [[ -n $fakes ]]; then
    kubectl apply -f - >/dev/null <<<"$fakes" || die "creating fake nodes failed"
  fi
  wait_for "scheduler healthy" curl -ksf "https://127.0.0.1:$SCHED_PORT/healthz"
  wait_for "controller-manager healthy" curl -ksf "https://127.0.0.1:$KCM_PORT/healthz"
  if [[ -n $fakes ]]; then
    wait_for "fake nodes Ready" kubectl wait --for=condition=Ready node -l type=kwok --timeout=1s
  fi
  wait_for "default service account" kubectl get serviceaccount default -n default
  if [[ ${DISTTRAIN_REAL_NODE:-0} == 1 ]]; then
    bash "$HACK/node.sh" sweep
    bash "$HACK/node.sh" up "$STATE" || die "real node failed to start"
  fi
  trap - EXIT
  log "up in $((SECONDS - start_s))s: $(kubectl get nodes -l type=kwok --no-headers 2>/dev/null | wc -l) fake nodes$(
    [[ -d $STATE/node ]] && echo ", real node disttrain-node")"
  cmd_env
}

# _reap NAME PID [UP_PID]: internal; stop the cluster when PID exits, once the `up`
# that started it (UP_PID) has finished too, so that nothing starts after the teardown.
cmd_reap() {
  local owner=$3 up=${4:-}
  while running "$owner"; do sleep 1; done
  while [[ -n $up ]] && running "$up"; do sleep 1; done
  [[ -d "$STATE" ]] || exit 0
  log "owner $owner gone; tearing down"
  rm -f "$STATE/pids/reaper.pid" # don't kill ourselves
  cmd_down
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  _reap) cmd_reap "$@" ;;
  *) echo "usage: $0 up|down|status|env [NAME]" >&2; exit 2 ;;
esac
