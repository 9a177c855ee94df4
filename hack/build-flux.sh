#!/usr/bin/env bash
# Build Flux's source-controller and kustomize-controller from Go modules and cache them,
# for the GitOps end-to-end tests (tests/e2e/test_flux.py starts them on demand).
#
#   hack/build-flux.sh            # prints the bin directory on the last line
#
# Each controller's module replaces its ./api module with a path, which the module zip
# does not hold: the build copies the module, points that replace at the published api
# module of the same version, and builds there. The CRDs come from the same modules.
# Everything lands under ${XDG_CACHE_HOME:-~/.cache}/agentworkers/bin/flux-<versions>, so a
# second run finds the binaries and returns at once.
set -euo pipefail

# shellcheck source=golib.sh
source "$(dirname "$0")/golib.sh" build-flux

bin="$cache/bin/flux-source-$FLUX_SOURCE_CONTROLLER_VERSION-kustomize-$FLUX_KUSTOMIZE_CONTROLLER_VERSION"
mkdir -p "$bin" "$work"

have_all() {
  [ -x "$bin/source-controller" ] && [ -x "$bin/kustomize-controller" ] && [ -s "$bin/crds.yaml" ]
}

# build NAME VERSION [go mod edit args...]: the controller NAME at VERSION into $bin/NAME.
build() {
  local name=$1 version=$2
  shift 2
  local module="github.com/fluxcd/$name" src dir="$work/$name-$version"
  log "downloading $module@$version"
  src=$(cd "$work" && go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$dir"
  cp -r "$src" "$dir"
  chmod -R u+w "$dir"
  (cd "$dir" && go mod edit -replace "$module/api=$module/api@$version" "$@")
  log "building $name $version (cold: about 5 minutes on 2 cores)"
  local tmp
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  # -mod=mod: go.sum takes the replacements' sums as the build resolves them.
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$tmp/$name" .)
  mv "$tmp/$name" "$bin/$name"
  rm -rf "$tmp"
  for crd in "$dir"/config/crd/bases/*.yaml; do
    echo "---"
    cat "$crd"
  done >>"$bin/crds.yaml.part"
}

if have_all; then
  echo "$bin"
  exit 0
fi
start=$(date +%s)
rm -f "$bin/crds.yaml.part"
build source-controller "$FLUX_SOURCE_CONTROLLER_VERSION" \
  -replace "github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@$FLUX_PKG_ARTIFACT_VERSION"
build kustomize-controller "$FLUX_KUSTOMIZE_CONTROLLER_VERSION"
mv "$bin/crds.yaml.part" "$bin/crds.yaml"
have_all || { log "some binaries are missing after the build"; exit 1; }
log "done in $(($(date +%s) - start))s"
echo "$bin"
