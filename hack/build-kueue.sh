#!/usr/bin/env bash
# Build Kueue's manager from its Go module and cache it with its CRDs, for the queueing
# end-to-end tests (tests/e2e/kueue.py starts it on demand against the local control plane).
#
#   hack/build-kueue.sh            # prints the bin directory on the last line
#
# The binary is cmd/kueue of sigs.k8s.io/kueue at $KUEUE_VERSION (hack/versions.env), built
# inside the downloaded module, so its own go.sum pins every dependency. The CRDs are the
# module's config/components/crd/bases, concatenated into crds.yaml; its webhooks'
# manifest is webhooks.yaml. Everything lands under
# ${XDG_CACHE_HOME:-~/.cache}/agentworkers/bin/kueue-<version>, so a second run finds them
# and returns at once; bumping KUEUE_VERSION builds the new one beside it.
set -euo pipefail

# shellcheck source=golib.sh
source "$(dirname "$0")/golib.sh" build-kueue

bin="$cache/bin/kueue-$KUEUE_VERSION"

have_all() {
  [ -x "$bin/kueue" ] && [ -s "$bin/crds.yaml" ] && [ -s "$bin/webhooks.yaml" ]
}

if have_all; then
  echo "$bin"
  exit 0
fi

module=sigs.k8s.io/kueue
mkdir -p "$bin" "$work"
start=$(date +%s)
log "downloading $module@$KUEUE_VERSION"
src=$(cd "$work" && go mod download -json "$module@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
# Into a temporary directory first: an interrupted build never leaves a half-written binary.
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ ! -x "$bin/kueue" ]; then
  log "building kueue $KUEUE_VERSION (cold: about 5 minutes on 2 cores)"
  # Stamp the version as Kueue's Makefile does, so its log and metrics name a real one.
  ldflags="-s -w -X $module/pkg/version.GitVersion=$KUEUE_VERSION"
  (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$tmp/kueue" ./cmd/kueue)
  mv "$tmp/kueue" "$bin/kueue"
fi
# Its CRDs, and its webhooks as its own manifests declare them (by Service; the tests
# register them by URL on loopback, tests/e2e/kueue.py).
for crd in "$src"/config/components/crd/bases/*.yaml; do
  echo "---"
  cat "$crd"
done >"$tmp/crds.yaml"
mv "$tmp/crds.yaml" "$bin/crds.yaml"
cp "$src/config/components/webhook/manifests.yaml" "$bin/webhooks.yaml"
log "done in $(($(date +%s) - start))s"
echo "$bin"
