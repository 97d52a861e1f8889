#!/usr/bin/env bash
# `make release REGISTRY=HOST[:PORT][/PATH] [DIST=dist]`: what a maintainer publishes for one
# version. It pushes the operator and trainer images (hack/images.sh push; PUSH_TLS_VERIFY=false
# for a plain-HTTP registry), then writes into DIST:
#   disttrain-VERSION.tgz   the chart, packaged with the pushed images as its defaults, so a
#                           plain `helm install` of it pulls from REGISTRY
#   disttrain-VERSION-py3-none-any.whl   the Python package (hack/wheel.sh)
#   images.txt              each pushed image as REF:VERSION@sha256:..., the digest the push made
#   SHA256SUMS              of the three above (sha256sum -c SHA256SUMS checks them)
# and prints the commands that install them. The images must be built (make images).
set -euo pipefail
HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
die() { echo "release: $*" >&2; exit 1; }

registry=${1:-}
registry=${registry%/}
[[ -n $registry ]] || die "REGISTRY is not set: make release REGISTRY=registry.example.com/ml [DIST=dist]"
dist=${2:-$ROOT/dist}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
chart_version=$(sed -n 's/^version: *//p' "$ROOT/charts/disttrain/Chart.yaml")
[[ $chart_version == "$version" ]] \
  || die "charts/disttrain/Chart.yaml says version $chart_version, pyproject.toml $version: release one version"
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
shown=$(realpath --relative-base="$PWD" "$dist")  # as the user would type it from here
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir "$work/digests"
PUSH_DIGESTS=$work/digests bash "$HACK/images.sh" push "$registry" >"$work/push.out"
: >"$work/images.txt"
for target in operator trainer; do
  digest=$(cat "$work/digests/$target.digest")
  [[ $digest == sha256:* ]] || die "the push of $target left no digest ($digest)"
  echo "$registry/$target:$version@$digest" >>"$work/images.txt"
done

# The chart as it is in the checkout, but with the pushed images as its defaults.
cp -r "$ROOT/charts/disttrain" "$work/disttrain"
values=$work/disttrain/values.yaml
for target in operator trainer; do
  grep -q "^  repository: ghcr.io/disttrain/$target\$" "$values" \
    || die "charts/disttrain/values.yaml has no '  repository: ghcr.io/disttrain/$target' line to point at $registry"
  sed -i "s#^  repository: ghcr.io/disttrain/$target\$#  repository: $registry/$target#" "$values"
done
helm=$(bash "$HACK/build-tools.sh" --print-bin)/helm
[[ -x $helm ]] || bash "$HACK/build-tools.sh" --only helm >&2
"$helm" lint --quiet "$work/disttrain" >&2 || die "helm lint of the packaged chart failed"
"$helm" package "$work/disttrain" -d "$work" >/dev/null

wheel=$(bash "$HACK/wheel.sh" "$work" | tail -1)
chart=$work/disttrain-$version.tgz
[[ -f $chart ]] || die "helm package wrote no $chart"
for f in "$chart" "$wheel" "$work/images.txt"; do cp "$f" "$dist/"; done
(cd "$dist" && sha256sum "disttrain-$version.tgz" "$(basename "$wheel")" images.txt >SHA256SUMS)

echo "released $version into $shown:"
(cd "$dist" && printf '  %s\n' "disttrain-$version.tgz" "$(basename "$wheel")" images.txt SHA256SUMS)
echo "images:"
sed 's/^/  /' "$dist/images.txt"
echo "install with:"
echo "helm install disttrain $shown/disttrain-$version.tgz -n disttrain-system --create-namespace"
echo "pip install '$shown/$(basename "$wheel")[cli]'"
