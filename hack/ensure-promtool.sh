#!/usr/bin/env bash
# promtool (alert rule checks) and prometheus (a real server scraping the operator and a
# trainer in the tests) come with Debian's prometheus package; install it when missing
# (CI and new machines run as root with Debian's registry).
set -euo pipefail
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && exit 0
echo "promtool: installing Debian's prometheus package (for promtool)" >&2
if [ "$(id -u)" != 0 ]; then
  echo "promtool is missing and this is not root: run 'sudo apt-get install prometheus'" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null && command -v prometheus >/dev/null
