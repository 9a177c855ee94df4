#!/usr/bin/env bash
# Build Jaeger (v2: an OpenTelemetry-collector distribution with in-memory storage, OTLP
# receivers and the query API) from Go modules and cache it, for the tracing e2e tests
# (tests/e2e/jaeger.py starts it on demand).
#
#   hack/build-jaeger.sh          # prints the bin directory (holding `jaeger`) on the last line
#
# jaeger comes from github.com/jaegertracing/jaeger/cmd/jaeger at $JAEGER_VERSION
# (hack/versions.env). Its module carries replace directives that `go install pkg@version`
# refuses, so the build makes a small module of its own that requires it as a tool
# (`go get -tool`) and builds the tool there. It lands under
# ${XDG_CACHE_HOME:-~/.cache}/agentworkers/bin/jaeger-<version>, so a second run finds the
# binary and returns at once.
set -euo pipefail

# shellcheck source=golib.sh
source "$(dirname "$0")/golib.sh" build-jaeger

bin="$cache/bin/jaeger-$JAEGER_VERSION"
module=github.com/jaegertracing/jaeger

if [ -x "$bin/jaeger" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$bin" "$work"
start=$(date +%s)
dir="$work/jaeger-$JAEGER_VERSION"
rm -rf "$dir"
mkdir -p "$dir"
log "resolving $module/cmd/jaeger@$JAEGER_VERSION"
(cd "$dir" && go mod init agentworkers.io/jaeger-build >/dev/null 2>&1 &&
  go get -tool "$module/cmd/jaeger@$JAEGER_VERSION")
log "building jaeger $JAEGER_VERSION (cold: about 7 minutes of CPU, 8 on 2 busy cores)"
# Into a temporary directory first: an interrupted build never leaves a half-written binary.
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$tmp/jaeger" "$module/cmd/jaeger")
mv "$tmp/jaeger" "$bin/jaeger"
log "done in $(($(date +%s) - start))s"
echo "$bin"
