#!/usr/bin/env bash
# A kind node image built on this machine, for machines that cannot pull kindest/node
# (no registry) and where `kind build node-image` cannot run (it pulls kindest/base and
# the control-plane images). It is assembled from what the project already builds:
#
#   - a Debian rootfs (debootstrap, this machine's mirror: hack/lib/apt-mirror.sh) with
#     what kind's own base image installs for a node (systemd, iptables, conntrack, ...),
#     runc and the CNI plugins from Debian;
#   - kind's node files (entrypoint, systemd units, kubelet drop-ins, containerd config)
#     from the kind module that hack/tools/kind pins, laid out as kind's base Dockerfile does;
#   - containerd 2, crictl, kubelet, kubeadm and kubectl from hack/build-tools.sh;
#   - the control-plane images `kubeadm config images list` names (kube-apiserver,
#     kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns, pause), each
#     made from the one binary hack/build-tools.sh built, tagged as kubeadm expects and
#     preloaded (not unpacked) into the rootfs's containerd, as kind does at build time.
#
#   hack/kind/node-image.sh build  build what is missing (progress on stderr), then
#                                  load it into the Docker engine of DOCKER_HOST
#   hack/kind/node-image.sh name   print the image name (its tag is its key)
#
# Everything is kept under ${DISTTRAIN_CACHE:-~/.cache/disttrain}/kind/: buildah storage
# is shared with hack/images.sh (images/storage). The key hashes this script, the
# binaries it takes and the kind module version, so a new pin builds a new image.
set -Eeuo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
DIR=$CACHE/kind/node-image
SUITE=bookworm
# shellcheck source=../lib/apt-mirror.sh
source "$HACK/lib/apt-mirror.sh"
BIN=$(bash "$HACK/build-tools.sh" --print-bin)
# What kind's base image installs for a node (images/base/Dockerfile), less the storage
# packages no test here uses (nfs, iscsi, fuse-overlayfs), plus runc and Debian's CNI
# plugins (kind builds both from source).
NODE_PACKAGES=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,procps,jq,runc,containernetworking-plugins
# kube-proxy's image: its one binary plus what it runs (iptables, conntrack).
PROXY_PACKAGES=iptables,conntrack,kmod

log() { printf '[kind node-image] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# any other failure says where it happened (set -E: inside functions too)
trap 'log "ERROR: line $LINENO: $BASH_COMMAND exited $?"' ERR

bah() { buildah --root "$CACHE/images/storage" --runroot "$CACHE/images/run" --storage-driver overlay "$@"; }

kube_version() { "$BIN/kubeadm" version -o short; }

# The kind module's source (its images/base/files), from the module cache.
kind_module_dir() {
  (cd "$HACK/tools/kind" && GOPATH=${GOPATH:-$CACHE/gopath} GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/kind) \
    | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

BINARIES=(kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy
  etcd coredns pause containerd containerd-shim-runc-v2 ctr crictl)

image_key() {
  {
    cat "${BASH_SOURCE[0]}"
    echo "$SUITE $(debian_mirror "$SUITE")"
    grep '^require\|sigs.k8s.io/kind ' "$HACK/tools/kind/go.mod"
    for b in "${BINARIES[@]}"; do echo "$b $(sha256sum <"$BIN/$b" | cut -c1-64)"; done
  } | sha256sum | cut -c1-12
}

name() { echo "localhost/disttrain/kind-node:$(kube_version)-$(image_key)"; }

# debootstrap DEST PACKAGES: a minimal Debian with PACKAGES, apt's lists and caches
# removed. The tree is kept (keyed on suite, mirror and packages) and copied, so a new
# binary does not fetch Debian again.
debootstrap_into() {
  local dest=$1 packages=$2 mirror key tree
  mirror=$(debian_mirror "$SUITE")
  key=$(echo "$SUITE $mirror $packages" | sha256sum | cut -c1-12)
  tree=$DIR/debian-$key
  if [[ ! -f $tree.done ]]; then
    rm -rf "$tree"
    debootstrap --variant=minbase --include="$packages" "$SUITE" "$tree" "$mirror" \
      >"$DIR/debootstrap.log" 2>&1 || die "debootstrap failed; see $DIR/debootstrap.log"
    rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/*.bin "$tree"/var/cache/apt/archives/*.deb
    touch "$tree.done"
  fi
  rm -rf "$dest"
  cp -a "$tree" "$dest"
}

# component NAME BINARY PATH [--entrypoint JSON] [--from DIR]: an image of one binary
# at PATH (on top of the rootfs DIR, else of nothing), committed as NAME.
component() {
  local name=$1 binary=$2 path=$3 ctr entrypoint='' from=''
  shift 3
  while (($#)); do
    case $1 in
      --entrypoint) entrypoint=$2; shift 2 ;;
      --from) from=$2; shift 2 ;;
    esac
  done
  ctr=$(bah from --pull=never scratch)
  [[ -z $from ]] || bah copy "$ctr" "$from/" / >/dev/null
  bah copy --chmod 0755 "$ctr" "$BIN/$binary" "$path" >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${entrypoint:+--entrypoint "$entrypoint"} --os linux --arch amd64 "$ctr"
  bah commit --quiet --rm "$ctr" "$name" >/dev/null
}

# The images kubeadm pulls, and the sandbox image kind's containerd config names.
control_plane_images() {
  local rootfs=$1 proxy_root=$2 image binary
  for image in $("$BIN/kubeadm" config images list --kubernetes-version "$(kube_version)" 2>/dev/null | grep -v /pause:) \
    "$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$rootfs/etc/containerd/config.toml")"; do
    binary=${image%:*}
    binary=${binary##*/}
    case $binary in
      kube-apiserver | kube-controller-manager | kube-scheduler)
        component "$image" "$binary" "/usr/local/bin/$binary" ;;
      kube-proxy) component "$image" kube-proxy /usr/local/bin/kube-proxy --from "$proxy_root" ;;
      etcd) component "$image" etcd /usr/local/bin/etcd ;;
      coredns) component "$image" coredns /coredns --entrypoint '["/coredns"]' ;;
      pause) component "$image" pause /pause --entrypoint '["/pause"]' ;;
      *) die "kubeadm names an image this script does not build: $image" ;;
    esac
    echo "$image"
  done
}

# Load IMAGES into the rootfs's containerd content store, unpacked by the node itself
# when first used (as kind's build does: pinned, --no-unpack). The containerd it runs for
# that is stopped here, or by cleanup when the build fails.
PRELOAD_PID=''
PRELOAD_STATE=''
preload() {
  local rootfs=$1 image fifo
  shift
  PRELOAD_STATE=$(mktemp -d /run/disttrain-kind-preload.XXXXXX)
  cat >"$PRELOAD_STATE/config.toml" <<EOF
version = 3
root = "$rootfs/var/lib/containerd"
state = "$PRELOAD_STATE/state"
[grpc]
  address = "$PRELOAD_STATE/containerd.sock"
[plugins."io.containerd.cri.v1.runtime"]
  disable = true
EOF
  "$BIN/containerd" --config "$PRELOAD_STATE/config.toml" >"$DIR/preload-containerd.log" 2>&1 &
  PRELOAD_PID=$!
  for _ in $(seq 100); do [[ -S $PRELOAD_STATE/containerd.sock ]] && break; sleep 0.1; done
  for image in "$@"; do
    fifo=$PRELOAD_STATE/image.tar
    rm -f "$fifo" && mkfifo "$fifo"
    bah push --quiet "$image" "docker-archive:$fifo:$image" &
    "$BIN/ctr" --address "$PRELOAD_STATE/containerd.sock" -n k8s.io images import \
      --label=io.cri-containerd.pinned=pinned --no-unpack --digests "$fifo" >>"$DIR/preload.log" 2>&1 \
      || die "preloading $image failed; see $DIR/preload.log"
    wait $! || die "buildah push of $image failed"
  done
  stop_preload
}

stop_preload() {
  if [[ -n $PRELOAD_PID ]]; then
    kill "$PRELOAD_PID" 2>/dev/null || true
    wait "$PRELOAD_PID" 2>/dev/null || true
    PRELOAD_PID=''
  fi
  [[ -z $PRELOAD_STATE ]] || rm -rf "$PRELOAD_STATE"
  PRELOAD_STATE=''
}

build_rootfs() {
  local rootfs=$1 files=$2
  debootstrap_into "$rootfs" "$NODE_PACKAGES"
  # kind's node files, with the modes its base Dockerfile gives them
  mkdir -p "$rootfs/kind/bin" "$rootfs/etc/containerd" "$rootfs/etc/systemd/system/kubelet.service.d"
  install -m 0755 "$files"/usr/local/bin/* "$rootfs/usr/local/bin/"
  install -m 0644 "$files"/kind/README.txt "$rootfs/kind/"
  install -m 0755 "$files"/kind/bin/* "$rootfs/kind/bin/"
  install -m 0644 "$files"/etc/crictl.yaml "$rootfs/etc/"
  install -m 0644 "$files"/etc/containerd/* "$rootfs/etc/containerd/"
  install -m 0644 "$files"/etc/default/* "$rootfs/etc/default/"
  install -m 0644 "$files"/etc/sysctl.d/* "$rootfs/etc/sysctl.d/"
  find "$files/etc/systemd/system" -maxdepth 1 -type f -exec install -m 0644 -t "$rootfs/etc/systemd/system/" {} +
  install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$rootfs/etc/systemd/system/kubelet.service.d/"
  # the systemd trimming kind's base image does
  find "$rootfs/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "$rootfs"/lib/systemd/system/multi-user.target.wants/* "$rootfs"/etc/systemd/system/*.wants/* \
    "$rootfs"/lib/systemd/system/local-fs.target.wants/* "$rootfs"/lib/systemd/system/sockets.target.wants/*udev* \
    "$rootfs"/lib/systemd/system/sockets.target.wants/*initctl* "$rootfs"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$rootfs/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$rootfs/sbin/init"
  chroot "$rootfs" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
  chroot "$rootfs" systemctl mask systemd-binfmt.service >/dev/null 2>&1
  mkdir -p "$rootfs/etc/kubernetes/manifests"
  # binaries: where kind's base image and node build put them
  install -m 0755 "$BIN/containerd" "$BIN/containerd-shim-runc-v2" "$BIN/ctr" "$BIN/crictl" "$rootfs/usr/local/bin/"
  install -m 0755 "$BIN/kubelet" "$BIN/kubeadm" "$BIN/kubectl" "$rootfs/usr/bin/"
  # Debian's CNI plugins live in /usr/lib/cni; containerd looks in /opt/cni/bin
  mkdir -p "$rootfs/opt/cni" && ln -sfn /usr/lib/cni "$rootfs/opt/cni/bin"
  # the runtime spec every pod starts from: containerd's default, with kind's product
  # files hook and without rlimits
  "$BIN/ctr" oci spec | python3 -c '
import json, sys
spec = json.load(sys.stdin)
spec.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
spec["process"].pop("rlimits", None)
json.dump(spec, sys.stdout, indent=2)' >"$rootfs/etc/containerd/cri-base.json"
  kube_version | tr -d '\n' >"$rootfs/kind/version"
}

cmd_build() {
  local name key rootfs proxy_root files ctr start=$SECONDS images
  command -v buildah >/dev/null && command -v debootstrap >/dev/null \
    || die "buildah and debootstrap are needed (bash hack/node/host-packages.sh installs them)"
  for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || die "$BIN/$b missing: run bash hack/build-tools.sh"; done
  mkdir -p "$DIR" "$CACHE/images"
  # hack/images.sh's lock: its build removes every buildah working container first
  exec 8>"$CACHE/images/build.lock"
  flock 8
  name=$(name)
  key=$(image_key)
  if ! bah inspect --type image "$name" >/dev/null 2>&1; then
    files=$(kind_module_dir)/images/base/files
    [[ -d $files ]] || die "kind's node files not found in the module cache ($files)"
    rootfs=$DIR/rootfs-$key
    proxy_root=$DIR/proxy-rootfs-$key
    # shellcheck disable=SC2064
    trap "stop_preload; rm -rf '$rootfs' '$proxy_root'" EXIT
    log "rootfs: debootstrap $SUITE (node packages)"
    build_rootfs "$rootfs" "$files"
    log "kube-proxy base: debootstrap $SUITE ($PROXY_PACKAGES)"
    debootstrap_into "$proxy_root" "$PROXY_PACKAGES"
    log "control-plane images from the built binaries"
    mapfile -t images < <(control_plane_images "$rootfs" "$proxy_root")
    log "preloading ${images[*]}"
    preload "$rootfs" "${images[@]}"
    ctr=$(bah from --pull=never scratch)
    bah copy "$ctr" "$rootfs/" / >/dev/null
    bah config --env container=docker --entrypoint '["/usr/local/bin/entrypoint", "/sbin/init"]' \
      --stop-signal SIGRTMIN+3 --os linux --arch amd64 "$ctr"
    bah commit --quiet --rm "$ctr" "$name" >/dev/null
    for image in "${images[@]}"; do bah rmi "$image" >/dev/null 2>&1 || true; done
    # node images of earlier keys
    bah images --noheading --format '{{.Name}}:{{.Tag}}' "${name%:*}" 2>/dev/null | grep -vx "$name" \
      | xargs -r buildah --root "$CACHE/images/storage" --runroot "$CACHE/images/run" --storage-driver overlay rmi >/dev/null 2>&1 || true
    log "built $name in $((SECONDS - start))s"
  else
    log "present: $name"
  fi
  load_into_docker "$name"
}

# Load the node image into the Docker engine (skipped when it is there already).
load_into_docker() {
  local name=$1 fifo
  if docker image inspect "$name" >/dev/null 2>&1; then return; fi
  docker images --format '{{.Repository}}:{{.Tag}}' "${name%:*}" | grep -vx "$name" | xargs -r docker rmi >/dev/null 2>&1 || true
  log "docker load $name"
  fifo=$(mktemp -u "$DIR/load.XXXXXX")
  mkfifo "$fifo"
  bah push --quiet "$name" "docker-archive:$fifo:$name" &
  docker load -i "$fifo" >/dev/null || { rm -f "$fifo"; die "docker load of $name failed"; }
  wait $! || { rm -f "$fifo"; die "buildah push of $name failed"; }
  rm -f "$fifo"
}

case "${1:-}" in
  build) cmd_build ;;
  name) name ;;
  *) echo "usage: $0 build|name" >&2; exit 2 ;;
esac
