#!/usr/bin/env bash
# Build krew (the kubectl plugin manager) from Go modules and cache it, for the test that
# installs the kubectl plugin with it.
#
#   hack/build-krew.sh            # prints the bin directory (holding `krew`) on the last line
set -euo pipefail

# shellcheck source=golib.sh
source "$(dirname "$0")/golib.sh" build-krew

bin="$cache/bin/krew-$KREW_VERSION"

if [ -x "$bin/krew" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$bin"
log "building krew $KREW_VERSION from sigs.k8s.io/krew"
GOBIN="$bin" go install "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION"
echo "$bin"
