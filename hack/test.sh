#!/usr/bin/env bash
# `make test`: every stage in order (virtualenv, tools, images, the whole suite), then
# how long each took, the suite per group and per test directory; printed even when a
# stage fails. Each group also lists its 30 slowest tests: where the CI budget
# (docs/contributing.md) goes.
#
#   hack/test.sh [pytest args...]          (the args go to every group's pytest)
#
# The suite runs in groups, DISTTRAIN_TEST_SLOTS (3) at a time, the longest first. Each
# group is its own pytest process with its own control plane (the `cluster` fixture names
# it after the process), so groups share nothing but the machine: the cluster tests mostly
# wait on the API server while the trainer and unit tests compute. tests/e2e is one group:
# it owns the one real node. A group's output is printed whole when it ends, and the
# failures of all groups again at the very end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
times=$(mktemp)
logs=$(mktemp -d)
declare -a stages=() groups_done=()
declare -A running=()  # pid (= its process group) -> group name, while it runs
summary() {
  local rc=$?
  for pid in "${!running[@]}"; do  # interrupted: each running group ends its session (its control plane goes)
    kill -INT -- "-$pid" 2>/dev/null || true
  done
  wait || true
  {
    if compgen -G "$logs/*.log" >/dev/null; then
      echo "---- make test: what failed, all groups"
      grep -h -E '^(FAILED|ERROR) ' "$logs"/*.log || echo "  nothing"
    fi
    echo "---- make test: time per stage (rc $rc)"
    printf '  %s\n' "${stages[@]}"
    (( ${#groups_done[@]} )) && printf '    %s\n' "${groups_done[@]}"
    sed 's/^/  /' "$times"
  } >&2
  rm -rf "$times" "$logs"
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

# The groups, longest first (hack/test_groups.py says why they are cut as they are).
declare -A paths=()
order=()
while read -r name args; do
  paths[$name]=$args
  order+=("$name")
done < <("$venv/bin/python" hack/test_groups.py "$root")
slots=${DISTTRAIN_TEST_SLOTS:-3}
suite_start=$SECONDS
suite_from=$(date -u +%T)
declare -A started=() begun=()
failed=0

finish() {  # print one ended group: its whole output, then its time
  local name=$1 rc=$2
  echo "==== group $name ended (rc $rc, $((SECONDS - started[$name]))s): ${paths[$name]} ===="
  cat "$logs/$name.log"
  groups_done+=("group $name $((SECONDS - started[$name]))s (${begun[$name]} to $(date -u +%T)), rc $rc")
  # 5: pytest selected nothing, which pytest args such as `-k NAME` make of most groups
  (( rc == 0 || (rc == 5 && selecting) )) || failed=1
}
selecting=$(( $# > 0 ))

reap_one() {  # wait for any running group to end, then print it
  local ended rc
  wait -n -p ended "${!running[@]}" && rc=0 || rc=$?
  finish "${running[$ended]}" "$rc"
  unset "running[$ended]"
}

set -m  # each group in a process group of its own: SIGINT reaches pytest, which then tears down
for name in "${order[@]}"; do
  while (( ${#running[@]} >= slots )); do
    reap_one
  done
  started[$name]=$SECONDS
  begun[$name]=$(date -u +%T)
  echo "==== group $name started at ${begun[$name]} (its output follows when it ends)"
  # shellcheck disable=SC2086  # paths holds several words on purpose
  env DISTTRAIN_STAGE_TIMES="$times" PYTHONPATH="$root/operator:$root/trainer" PATH="$venv/bin:$bin:$PATH" \
    python -m pytest --durations=30 "$@" ${paths[$name]} >"$logs/$name.log" 2>&1 &
  running[$!]=$name
done
while (( ${#running[@]} )); do
  reap_one
done
set +m
stages+=("tests $((SECONDS - suite_start))s ($suite_from to $(date -u +%T)), $slots groups at a time:")
exit "$failed"
