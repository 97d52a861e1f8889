# Process helpers shared by hack/cluster.sh and hack/node.sh (sourced; needs log()).
# Every component runs in its own session (setsid), so its PID is its process group.

# running PID: alive and not a zombie (PID 1 may not reap our orphans)
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# group_members PGID...: the live processes of those process groups (one pass
# over /proc, no subprocess per entry: it runs in tight loops while stopping)
group_members() {
  local f stat rest state pgrp g
  for f in /proc/[0-9]*/stat; do
    read -r stat 2>/dev/null <"$f" || continue
    rest=${stat##*) }      # state ppid pgrp ...
    state=${rest%% *}
    rest=${rest#* }
    rest=${rest#* }
    pgrp=${rest%% *}
    [[ $state == Z ]] && continue
    for g in "$@"; do
      [[ $pgrp == "$g" ]] && { echo "${stat%% *}"; break; }
    done
  done
  return 0
}

# kill_groups SECONDS PGID...: TERM each group (in the order given), KILL what is
# left after SECONDS, and return only when no member of any group is alive.
kill_groups() {
  local grace=$1 i g left
  shift
  (($#)) || return 0
  for g in "$@"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  for ((i = 0; i < grace * 10; i++)); do
    left=$(group_members "$@")
    [[ -z $left ]] && return 0
    sleep 0.1
  done
  for g in "$@"; do kill -KILL -- "-$g" 2>/dev/null || true; done
  for ((i = 0; i < 100; i++)); do
    left=$(group_members "$@")
    [[ -z $left ]] && return 0
    sleep 0.1
  done
  log "still alive after SIGKILL: $(echo $left)"
}

# The helpers below use $STATE (pids/, logs/) and the array WATCH of component
# names whose death ends a wait.

alive() { local pid; pid=$(cat "$STATE/pids/$1.pid" 2>/dev/null) && running "$pid"; }

# start NAME COMMAND...: run in its own session (process group), log to file
start() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/pids/$name.pid"
}

# poll_until DEADLINE WHAT COMMAND...: run COMMAND until it succeeds; die when a
# started WATCH component exits (with its log tail) or at DEADLINE (a $SECONDS value).
poll_until() {
  local deadline=$1 what=$2 name
  shift 2
  until "$@" >/dev/null 2>&1; do
    for name in "${WATCH[@]}"; do
      [[ -f "$STATE/pids/$name.pid" ]] || continue # not started yet
      alive "$name" || die "$name exited while waiting for $what; tail of its log:
$(tail -n 30 "$STATE/logs/$name.log")"
    done
    ((SECONDS < deadline)) || die "timed out waiting for $what (logs: $STATE/logs)"
    sleep 0.25
  done
}
