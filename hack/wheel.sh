#!/usr/bin/env bash
# Builds the Python package, dist/disttrain-<version>-py3-none-any.whl (or into DEST), from
# a copy of the checkout's tracked files, so the checkout gets no build/ or egg-info folder.
# Install the wheel anywhere: pip install 'dist/disttrain-0.1.0-py3-none-any.whl[cli]'.
# Usage: bash hack/wheel.sh [DEST]   (PYTHON: the interpreter that builds; default the project venv's)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$(realpath -m "${1:-$root/dist}")
python=${PYTHON:-$(bash "$root/hack/venv.sh")/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && git ls-files -z -- operator trainer pyproject.toml README.md | xargs -0 cp --parents -t "$work")
mkdir -p "$dest"
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$dest" "$work" >&2
ls "$dest"/disttrain-*.whl
