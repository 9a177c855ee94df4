#!/usr/bin/env bash
# Build the local control plane's binaries from Go modules and cache them.
#
#   hack/build-binaries.sh            # prints the bin directory on the last line
#
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come from
# k8s.io/kubernetes, etcd from go.etcd.io/etcd/server/v3, kwok from sigs.k8s.io/kwok.
# Everything lands under ${XDG_CACHE_HOME:-~/.cache}/agentworkers, so a second
# run finds the binaries and returns at once.
set -euo pipefail

# shellcheck source=golib.sh
source "$(dirname "$0")/golib.sh" build-binaries

bin="$cache/bin/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
mkdir -p "$bin" "$work"

have_all() {
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok; do
    [ -x "$bin/$b" ] || return 1
  done
  [ -s "$bin/kwok-stages.yaml" ] && [ -s "$bin/kwok-logs-crd.yaml" ]
}

build_kubernetes() {
  local mod="$work/kubernetes-$KUBERNETES_VERSION" minor
  minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  mkdir -p "$mod"
  log "resolving k8s.io/kubernetes $KUBERNETES_VERSION"
  local gomod
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes replaces its staging modules with ./staging paths, which a
  # dependent module cannot see; pin each to its published v0.x release instead.
  {
    echo "module agentworkers.local/kubernetes-build"
    echo
    echo "go $(sed -n 's/^go //p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$gomod" |
      while read -r m; do echo "	$m => $m v0.${KUBERNETES_VERSION#v1.}"; done
    echo ")"
  } >"$mod/go.mod"
  local pkgs=(cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubectl)
  log "downloading modules (cold: a few minutes)"
  local targets=()
  for p in "${pkgs[@]}"; do targets+=("k8s.io/kubernetes/$p@$KUBERNETES_VERSION"); done
  # Versioned, or `go get` would move to the newest k8s.io/kubernetes.
  (cd "$mod" && go get "${targets[@]}")
  local date ldflags=""
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  # Stamp the version so clients (and kubectl version) see a real one.
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  for p in "${pkgs[@]}"; do
    log "building ${p#cmd/} (cold: several minutes each on 2 cores)"
    (cd "$mod" && go build -trimpath -ldflags "-s -w $ldflags" -o "$bin/${p#cmd/}" "k8s.io/kubernetes/$p")
  done
}

build_etcd() {
  local mod="$work/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  cat >"$mod/go.mod" <<MOD
module agentworkers.local/etcd-build

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  log "building etcd $ETCD_VERSION"
  (cd "$mod" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
    go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  log "building kwok $KWOK_VERSION"
  GOBIN="$bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

kwok_stages() {
  # kwok runs no stage it is not given: take its own "fast" node and pod stages (nodes
  # go Ready and keep a lease; pods run; Job pods complete; deleted pods go away).
  local src
  src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$src/$f"
  done >"$bin/kwok-stages.yaml"
  # The Logs CRD lets the pod runner tell kwok where a pod's log is: `kubectl logs` works.
  cp "$src/../crd/bases/kwok.x-k8s.io_logs.yaml" "$bin/kwok-logs-crd.yaml"
}

if have_all; then
  echo "$bin"
  exit 0
fi
start=$(date +%s)
[ -x "$bin/etcd" ] || build_etcd
[ -x "$bin/kwok" ] || build_kwok
[ -s "$bin/kwok-logs-crd.yaml" ] || kwok_stages
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [ -x "$bin/$b" ] || { build_kubernetes; break; }
done
have_all || { log "some binaries are missing after the build"; exit 1; }
log "done in $(($(date +%s) - start))s"
echo "$bin"
