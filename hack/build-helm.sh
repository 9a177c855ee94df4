#!/usr/bin/env bash
# Build helm from Go modules and cache it, for the chart's lint and render tests.
#
#   hack/build-helm.sh            # prints the bin directory (holding `helm`) on the last line
#
# helm comes from helm.sh/helm/v<major>/cmd/helm at $HELM_VERSION (hack/versions.env).
# It lands under ${XDG_CACHE_HOME:-~/.cache}/agentworkers/bin/helm-<version>, so a second
# run finds the binary and returns at once. Bumping HELM_VERSION builds the new one beside it.
set -euo pipefail

# shellcheck source=golib.sh
source "$(dirname "$0")/golib.sh" build-helm

bin="$cache/bin/helm-$HELM_VERSION"

if [ -x "$bin/helm" ]; then
  echo "$bin"
  exit 0
fi

major=${HELM_VERSION%%.*}          # v4.3.2 -> v4
module="helm.sh/helm/$major"
mkdir -p "$bin"
start=$(date +%s)
log "building helm $HELM_VERSION from $module (cold: a few minutes on 2 cores)"
# Stamp the version as helm's own Makefile does, so `helm version` shows a real one
# (helm 4 reads the Kubernetes version it assumes from the build info of its client-go).
ldflags="-s -w -X $module/internal/version.version=$HELM_VERSION"
ldflags+=" -X $module/internal/version.metadata= -X $module/internal/version.gitTreeState=clean"
if [ "$major" = v3 ]; then
  # helm 3 takes the Kubernetes version it assumes (`helm template`, kubeVersion checks)
  # from ldflags too: its client-go's minor, as its Makefile does.
  gomod=$(cd "$cache" && go mod download -json "$module@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  minor=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod")
  for p in pkg/chartutil pkg/lint/rules; do
    ldflags+=" -X $module/$p.k8sVersionMajor=1 -X $module/$p.k8sVersionMinor=$minor"
  done
fi
# Into a temporary directory first: an interrupted build never leaves a half-written binary.
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "$module/cmd/helm@$HELM_VERSION"
mv "$tmp/helm" "$bin/helm"
"$bin/helm" version --short >&2
log "done in $(($(date +%s) - start))s"
echo "$bin"
