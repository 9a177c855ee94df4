#!/usr/bin/env bash
# Build krew (the kubectl plugin manager) from Go modules and cache it, for the test that
# installs the kubectl plugin with it.
#
#   hack/build-krew.sh            # prints the bin directory (holding `krew`) on the last line
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${AGENTWORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentworkers}
bin="$cache/bin/krew-$KREW_VERSION"

if [ -x "$bin/krew" ]; then
  echo "$bin"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
export GOCACHE=${GOCACHE:-$cache/go-build} GOMODCACHE=${GOMODCACHE:-$cache/go-mod}
mkdir -p "$bin"
printf '[build-krew %s] building krew %s from sigs.k8s.io/krew\n' "$(date +%H:%M:%S)" "$KREW_VERSION" >&2
GOBIN="$bin" go install "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION"
echo "$bin"
