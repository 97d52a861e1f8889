#!/usr/bin/env bash
# Debian packages the real node and the image builds need on the host, installed
# with apt-get when one is missing (root; no-op when all are there):
#   runc                         the OCI runtime under containerd (crun refuses hybrid cgroups)
#   containernetworking-plugins  CNI bridge, host-local (/usr/lib/cni)
#   iptables                     one DNAT rule to the API server, our FORWARD guard
#   buildah                      builds our Dockerfile without a Docker engine
#   debootstrap                  the Debian root filesystem of the base image (and kind's node image)
#   docker.io                    dockerd for kind (hack/kind/dockerd.sh starts a private one)
set -euo pipefail
declare -A NEED=([runc]=runc [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables [buildah]=buildah [debootstrap]=debootstrap [dockerd]=docker.io)
missing=()
for probe in "${!NEED[@]}"; do
  if [[ $probe == /* ]]; then [[ -e $probe ]] && continue; else command -v "$probe" >/dev/null && continue; fi
  missing+=("${NEED[$probe]}")
done
((${#missing[@]})) || exit 0
[[ $EUID == 0 ]] || { echo "[host-packages] need root to install: ${missing[*]}" >&2; exit 1; }
echo "[host-packages] apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
