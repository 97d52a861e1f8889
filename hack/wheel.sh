#!/usr/bin/env bash
# Builds the Python package, dist/disttrain-<version>-py3-none-any.whl (or into DEST), from
# a copy of the checkout's tracked files (git add a new module first), so the checkout gets
# no build/ or egg-info folder. Install the wheel anywhere:
#   pip install 'dist/disttrain-0.1.0-py3-none-any.whl[cli]'
# Usage: bash hack/wheel.sh [DEST]   (PYTHON: the interpreter that builds, default python3;
# pip fetches setuptools for the build when that interpreter lacks setuptools >= 68)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "${1:-$root/dist}"
dest=$(cd "${1:-$root/dist}" && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && git ls-files -z -- operator trainer pyproject.toml README.md LICENSE | tar --null -T - -cf - | tar -xf - -C "$work")
isolation=()
if "$python" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 68)' 2>/dev/null; then
  isolation=(--no-build-isolation)
fi
"$python" -m pip wheel -q --no-deps "${isolation[@]}" -w "$dest" "$work" >&2
ls "$dest"/disttrain-*.whl
