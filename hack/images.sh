#!/usr/bin/env bash
# Our images without Docker and without a registry: a Debian base made with
# debootstrap, then the project's Dockerfile built with buildah for both
# targets, each kept in buildah storage under the cache and keyed on its inputs.
#
#   hack/images.sh build            build what is missing (progress on stderr)
#   hack/images.sh import SOCK DIR  load the images into containerd's k8s.io
#                                   namespace (skipped when already there)
#   hack/images.sh names            print "NAME KEY" per image
#   hack/images.sh pause-name       the pod sandbox image containerd is told to use
#   hack/images.sh archive NAME OUT write a docker-archive (kind load image-archive)
#   hack/images.sh stream NAME      write NAME as a docker-archive to stdout (hack/kind.sh)
#   hack/images.sh id NAME          print the image's ID (its config digest, as crictl shows it)
#   hack/images.sh build-args       the flags both builders pass (this one, and docker in
#                                   hack/kind.sh) besides BASE_IMAGE: the version and
#                                   revision (the source key) for the OCI labels
#   hack/images.sh sizes            print "NAME SIZE" per built image (uncompressed)
#   hack/images.sh push REGISTRY    push the operator and trainer images as
#                                   REGISTRY/{operator,trainer}:VERSION (make push); then
#                                   print the helm flags that install from them.
#                                   PUSH_TLS_VERIFY=false for a plain-HTTP registry; the
#                                   credentials are buildah's (buildah login REGISTRY, or
#                                   docker login's ~/.docker/config.json).
#                                   PUSH_DIGESTS=DIR writes DIR/{operator,trainer}.digest,
#                                   the manifest digest each push made (make release)
#
# The Dockerfile's base is the build arg BASE_IMAGE (default python:3.11-slim,
# what Docker users get). Here it is a locally built stand-in,
# localhost/disttrain/python:3.11-bookworm: Debian bookworm's own Python 3.11
# from debootstrap, with `python` and `pip` on PATH like the official image.
# pip inside the build needs the machine's CA bundle: it is passed as the build
# secret `pip-ca` (mounted only while a RUN step runs, never in a layer).
#
# The pod sandbox image is built here too, from the pause binary of
# hack/build-tools.sh (hack/tools/pause), as localhost/disttrain/pause:<hash>.
#
# Everything lives under ${DISTTRAIN_CACHE:-~/.cache/disttrain}/images/:
# buildah's storage (storage/, so dependency layers are reused across builds)
# and the keys of what was built (built-*). Keys hash the step that builds
# (the base: its function, suite and mirror) and, for our two images, the base
# key, the build step, the Dockerfile, constraints.txt, pyproject.toml, README.md and
# every file under operator/ and trainer/ that git tracks.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CACHE=${DISTTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/disttrain}
DIR=$CACHE/images
SUITE=bookworm
# shellcheck source=lib/apt-mirror.sh
source "$HACK/lib/apt-mirror.sh"
MIRROR=$(debian_mirror "$SUITE")  # this machine's own, or DISTTRAIN_DEBIAN_MIRROR
BASE_IMAGE=localhost/disttrain/python:3.11-bookworm
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
# image name -> Dockerfile target
# localhost/disttrain/example-transformers: a user's own image (the trainer plus Transformers)
# for instrument: auto's real-node test; never published.
declare -A TARGETS=([ghcr.io/disttrain/operator:$VERSION]=operator [ghcr.io/disttrain/trainer:$VERSION]=trainer
                    [localhost/disttrain/example-transformers:$VERSION]=example-transformers)
CA_BUNDLE=${DISTTRAIN_PIP_CA:-/etc/ssl/certs/ca-certificates.crt}

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

bah() { buildah --root "$DIR/storage" --runroot "$DIR/run" --storage-driver overlay "$@"; }

# Keys hash what each step does (its function's text), not the whole script.
base_key() { { declare -f build_base; echo "$SUITE $MIRROR $BASE_IMAGE"; } | sha256sum | cut -c1-12; }

source_key() {
  {
    base_key
    declare -f build_image
    cd "$ROOT"
    git ls-files -z -co --exclude-standard -- Dockerfile .dockerignore constraints.txt pyproject.toml README.md operator trainer \
      | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-12
}

# Remove buildah working containers and unmount what a killed build left mounted.
cleanup_storage() {
  bah rm --all >/dev/null 2>&1 || true
  rm -rf "$DIR/tmp"  # buildah's big temporary files (a build that failed on a full disk left 11 GB in /var/tmp)
  local m
  for m in $(awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
}

build_base() {
  local key stamp rootfs ctr
  key=$(base_key)
  stamp=$DIR/built-base-$key
  [[ -f $stamp ]] && bah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1 && { log "base: present ($key)"; return; }
  command -v debootstrap >/dev/null || die "debootstrap not found (bash hack/node/host-packages.sh installs it)"
  local start=$SECONDS
  rootfs=$DIR/rootfs-$key
  rm -rf "$rootfs"
  log "base: debootstrap $SUITE from $MIRROR"
  debootstrap --variant=minbase --include=python3,python3-pip,passwd,ca-certificates \
    "$SUITE" "$rootfs" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 \
    || die "debootstrap failed; see $DIR/debootstrap.log"
  # Like python:3.11-slim: `python` and `pip` on PATH, pip installs as root
  # into /usr/local (no PEP 668 marker: the image is the environment).
  ln -sf python3 "$rootfs/usr/bin/python"
  ln -sf pip3 "$rootfs/usr/bin/pip"
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  ctr=$(bah from --pull=never scratch)
  bah copy "$ctr" "$rootfs/" / >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 --os linux --arch amd64 "$ctr"
  bah commit --rm "$ctr" "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  touch "$stamp"
  log "base: $BASE_IMAGE built in $((SECONDS - start))s"
}

pause_name() {
  local bin
  bin=$(bash "$HACK/build-tools.sh" --print-bin)/pause
  [[ -x $bin ]] || die "$bin missing: run hack/build-tools.sh"
  echo "localhost/disttrain/pause:$(sha256sum "$bin" | cut -c1-12)"
}

build_pause() {
  local name ctr bin
  name=$(pause_name)
  bah inspect --type image "$name" >/dev/null 2>&1 && { log "pause: present"; return; }
  bin=$(bash "$HACK/build-tools.sh" --print-bin)/pause
  ctr=$(bah from --pull=never scratch)
  bah copy --chmod 0755 "$ctr" "$bin" /pause >/dev/null
  bah config --entrypoint '["/pause"]' --cmd '' --user 65535:65535 --os linux --arch amd64 "$ctr"
  bah commit --rm "$ctr" "$name" >/dev/null
  log "pause: $name built"
}

# The OCI version (a build arg) and revision: the source key, what the image was built
# from, as a --label, which touches no cached layer.
build_args() { printf -- '--build-arg VERSION=%s --label org.opencontainers.image.revision=%s\n' "$VERSION" "$(source_key)"; }

build_image() {
  local name=$1 target=${TARGETS[$1]} key stamp start=$SECONDS args
  key=$(source_key)
  read -ra args <<<"$(build_args)"
  stamp=$DIR/built-$target-$key
  [[ -f $stamp ]] && bah inspect --type image "$name" >/dev/null 2>&1 && { log "$target: present ($key)"; return; }
  log "$target: buildah build --target $target -> $name"
  bah build --isolation chroot --layers --pull=never --target "$target" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" "${args[@]}" \
    --secret "id=pip-ca,src=$CA_BUNDLE" \
    --label "dev.disttrain.source-key=$key" -t "$name" "$ROOT" >"$DIR/build-$target.log" 2>&1 \
    || die "$target build failed; tail of $DIR/build-$target.log:
$(tail -n 30 "$DIR/build-$target.log")"
  rm -f "$DIR"/built-"$target"-*
  touch "$stamp"
  log "$target: built in $((SECONDS - start))s"
}

cmd_build() {
  command -v buildah >/dev/null || die "buildah not found (bash hack/node/host-packages.sh installs it)"
  mkdir -p "$DIR"
  exec 8>"$DIR/build.lock"
  flock 8
  trap cleanup_storage EXIT
  cleanup_storage
  mkdir -p "$DIR/tmp"
  export TMPDIR="$DIR/tmp"  # where buildah stages layers; ours to remove, under the build lock
  # A build killed half-way (a test run stopped, a full disk) leaves its layers behind,
  # ~6 GB for the trainer: give them back before this build needs the room.
  bah rmi --prune >/dev/null 2>&1 || true
  build_pause
  build_base
  local name
  for name in "${!TARGETS[@]}"; do build_image "$name"; done
  bah rmi --prune >/dev/null 2>&1 || true  # dangling layers of older builds
}

# import SOCKET STAMPS: every image into containerd's k8s.io namespace, unless
# STAMPS (a directory inside containerd's root) says this very image (buildah's
# image ID) went in before and containerd still lists it.
cmd_import() {
  local socket=$1 stamps=$2 name id stamp ctr_bin start fifo pusher
  ctr_bin=$(bash "$HACK/build-tools.sh" --print-bin)/ctr
  mkdir -p "$stamps"
  for name in "$(pause_name)" "${!TARGETS[@]}"; do
    id=$(bah inspect --type image --format '{{.FromImageID}}' "$name") || die "$name not built: run $0 build"
    stamp=$stamps/$(printf '%s' "$name" | tr '/:' '__')
    if [[ $(cat "$stamp" 2>/dev/null) == "$id" ]] \
      && "$ctr_bin" --address "$socket" -n k8s.io images ls -q "name==$name" | grep -qx "$name"; then
      log "import: $name present"
      continue
    fi
    start=$SECONDS
    fifo=$(mktemp -u "$DIR/import.XXXXXX")
    mkfifo "$fifo"
    bah push --quiet "$name" "docker-archive:$fifo:$name" &
    pusher=$!
    if ! "$ctr_bin" --address "$socket" -n k8s.io images import --local --discard-unpacked-layers "$fifo" >"$DIR/import.log" 2>&1; then
      kill "$pusher" 2>/dev/null || true
      rm -f "$fifo"
      die "ctr import of $name failed: $(tail -n 5 "$DIR/import.log")"
    fi
    wait "$pusher" || { rm -f "$fifo"; die "buildah push of $name failed"; }
    rm -f "$fifo"
    echo "$id" >"$stamp"
    log "import: $name in $((SECONDS - start))s"
  done
}

# stream NAME: a docker-archive on stdout (buildah writes archives to a path only).
cmd_stream() {
  local fifo pusher
  fifo=$(mktemp -u "${TMPDIR:-/tmp}/disttrain-stream.XXXXXX")
  mkfifo "$fifo"
  # shellcheck disable=SC2064
  trap "rm -f '$fifo'" EXIT
  bah push --quiet "$1" "docker-archive:$fifo:$1" &
  pusher=$!
  cat "$fifo"
  wait "$pusher" || die "buildah push of $1 failed"
}

# push REGISTRY: the two published images (example-transformers is a test image, never
# published), compressed as registries serve them.
cmd_push() {
  local registry=${1%/} name target dest start tls=() digest
  [[ -n $registry && $registry != */ && $registry != *://* ]] \
    || die "REGISTRY=${1:-} is not a registry path: give host[:port][/path], e.g. make push REGISTRY=registry.example.com/ml"
  [[ ${PUSH_TLS_VERIFY:-true} == false ]] && tls=(--tls-verify=false)
  for target in operator trainer; do
    name=ghcr.io/disttrain/$target:$VERSION
    bah inspect --type image "$name" >/dev/null 2>&1 || die "$name not built: run make images"
    dest=$registry/$target:$VERSION
    start=$SECONDS
    log "push: $name -> $dest"
    digest=()
    [[ -n ${PUSH_DIGESTS:-} ]] && digest=(--digestfile "$PUSH_DIGESTS/$target.digest")
    bah push --quiet "${tls[@]}" "${digest[@]}" "$name" "docker://$dest" >/dev/null \
      || die "buildah push to $dest failed (log in with: buildah login ${registry%%/*}; a plain-HTTP registry needs PUSH_TLS_VERIFY=false)"
    log "push: $dest in $((SECONDS - start))s"
  done
  echo "pushed $registry/operator:$VERSION and $registry/trainer:$VERSION; install with:"
  echo "helm upgrade --install disttrain charts/disttrain -n disttrain-system --create-namespace --set image.repository=$registry/operator --set trainerImage.repository=$registry/trainer"
}

case "${1:-}" in
  build) cmd_build ;;
  import) [[ -n ${3:-} ]] || die "usage: $0 import SOCKET STAMPS"; cmd_import "$2" "$3" ;;
  pause-name) pause_name ;;
  names) for n in "${!TARGETS[@]}"; do echo "$n $(source_key)"; done ;;
  build-args) build_args ;;
  sizes) for n in "${!TARGETS[@]}"; do bah images --noheading --format '{{.Name}}:{{.Tag}} {{.Size}}' "$n"; done ;;
  stream) [[ -n ${2:-} ]] || die "usage: $0 stream NAME"; cmd_stream "$2" ;;
  push) cmd_push "${2:-}" ;;
  id) [[ -n ${2:-} ]] || die "usage: $0 id NAME"; bah inspect --type image --format '{{.FromImageID}}' "$2" ;;
  archive) [[ -n ${3:-} ]] || die "usage: $0 archive NAME OUT"; bah push "$2" "docker-archive:$3:$2" ;;
  *) echo "usage: $0 build|import SOCKET STAMPS|names|pause-name|build-args|sizes|push REGISTRY|archive NAME OUT|stream NAME|id NAME" >&2; exit 2 ;;
esac
