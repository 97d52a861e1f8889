#!/usr/bin/env bash
# `make test`: every stage in order (virtualenv, tools, images, the whole suite), then
# how long each took, the suite per test directory; printed even when a stage fails.
# pytest also lists the 30 slowest tests: where the CI budget (docs/contributing.md) goes.
#
#   hack/test.sh [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
times=$(mktemp)
declare -a stages=()
summary() {
  local rc=$?
  {
    echo "---- make test: time per stage (rc $rc)"
    printf '  %s\n' "${stages[@]}"
    sed 's/^/  /' "$times"
  } >&2
  rm -f "$times"
}
trap summary EXIT
stage() {
  local name=$1 start=$SECONDS from
  from=$(date -u +%T)
  shift
  "$@"
  stages+=("$name $((SECONDS - start))s ($from to $(date -u +%T))")
}
stage venv bash hack/venv.sh >/dev/null
venv=$(bash hack/venv.sh)
stage tools bash -c 'bash hack/build-tools.sh && bash hack/ensure-promtool.sh && bash hack/node/host-packages.sh'
stage images bash hack/images.sh build
bin=$(bash hack/build-tools.sh --print-bin)
stage tests env DISTTRAIN_STAGE_TIMES="$times" PYTHONPATH="$root/operator:$root/trainer" \
  PATH="$venv/bin:$bin:$PATH" python -m pytest --durations=30 "$@" tests
