# Sourced by the hack/build-*.sh scripts that build a tool from Go modules: the pinned
# versions, the cache they build into, and a Go that builds the same way every time.
#
#   source "$(dirname "$0")/golib.sh" NAME   # NAME prefixes the log lines

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

# Everything lands under ${XDG_CACHE_HOME:-~/.cache}/agentworkers, so a second run finds
# the binaries and returns at once.
cache=${AGENTWORKERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentworkers}
work="$cache/build"

# A too-new module must fail fast rather than download another toolchain.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
export GOCACHE=${GOCACHE:-$cache/go-build} GOMODCACHE=${GOMODCACHE:-$cache/go-mod}

golib_name=${1:-build}
log() { printf '[%s %s] %s\n' "$golib_name" "$(date +%H:%M:%S)" "$*" >&2; }
