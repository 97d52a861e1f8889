# shellcheck shell=bash
# debian_mirror SUITE: the Debian archive this machine's apt already uses for SUITE, so the
# project names no package host of its own. DISTTRAIN_DEBIAN_MIRROR overrides it. Reads
# deb822 stanzas (/etc/apt/sources.list.d/*.sources: URIs + Suites) and one-line entries
# (sources.list, *.list: "deb URI SUITE ..."); the first source that serves SUITE wins.
debian_mirror() {
  local suite=$1
  if [[ -n ${DISTTRAIN_DEBIAN_MIRROR:-} ]]; then
    echo "${DISTTRAIN_DEBIAN_MIRROR%/}"
    return
  fi
  local apt=${DISTTRAIN_APT_DIR:-/etc/apt} found
  found=$(
    {
      for f in "$apt"/sources.list.d/*.sources; do [[ -f $f ]] && { cat "$f"; echo; }; done
    } | awk -v suite="$suite" '
      function flush() { if (!done && uris != "" && (" " suites " ") ~ (" " suite " ")) { split(uris, u, " "); print u[1]; done = 1; exit } uris = ""; suites = "" }
      /^[ \t]*$/ { flush(); next }
      /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      END { flush() }'
  )
  if [[ -z $found ]]; then
    found=$(cat "$apt"/sources.list "$apt"/sources.list.d/*.list 2>/dev/null \
      | awk -v suite="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }')
  fi
  if [[ -z $found ]]; then
    echo "no apt source for Debian $suite in $apt/sources.list(.d): set DISTTRAIN_DEBIAN_MIRROR to a Debian mirror URL" >&2
    return 1
  fi
  echo "${found%/}"
}
