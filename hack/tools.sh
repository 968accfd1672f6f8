#!/usr/bin/env bash
# Builds the local control plane and code generators from Go modules, into a per-user cache keyed
# by the pins, and links them into bin/. Re-running is cheap: a build happens only when a pin
# (hack/tools/go.mod, go.sum, the mains, the versions below or the Go version) changes.
#
#   hack/tools.sh            build everything (etcd, kube-apiserver, kube-controller-manager,
#                            kube-scheduler, kwok, controller-gen)
#   hack/tools.sh dir        print the directory holding the binaries (building first if needed)
set -euo pipefail

KUBE_VERSION=v1.37.2
KWOK_VERSION=v0.8.0
CONTROLLER_TOOLS_VERSION=v0.23.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
tools="$root/hack/tools"
key=$( { cat "$tools/go.mod" "$tools/go.sum" "$tools"/*/main.go; echo "$KUBE_VERSION $KWOK_VERSION $CONTROLLER_TOOLS_VERSION"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)
cache="$cache_home/capstan/tools/$key"

log() { printf '[tools] %s\n' "$*" >&2; }

# progress reads `go build -v` package names and prints a line every 200 packages.
progress() {
  local n=0 line
  while IFS= read -r line; do
    case "$line" in
      \#*|*.go:*|go:*) printf '%s\n' "$line" >&2 ;;
      *) n=$((n + 1)); if (( n % 200 == 0 )); then log "  compiled $n packages…"; fi ;;
    esac
  done
}

build() {
  local tmp="$cache.tmp.$$"
  remove_dir "$tmp" ".tmp.$$"; mkdir -p "$tmp"
  local major=${KUBE_VERSION#v}; major=${major%%.*}
  local minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  log "building etcd, kube-apiserver, kube-controller-manager, kube-scheduler $KUBE_VERSION into $cache"
  log "the first build compiles ~3,000 packages and takes 15-25 minutes on 2 cores; later runs reuse it"
  (cd "$tools" && go build -v -trimpath -ldflags "$ldflags" -o "$tmp/" ./etcd ./kube-apiserver ./kube-controller-manager ./kube-scheduler 2>&1) | progress
  [ "${PIPESTATUS[0]}" -eq 0 ] || { log "control-plane build failed"; exit 1; }
  log "building kwok $KWOK_VERSION and controller-gen $CONTROLLER_TOOLS_VERSION"
  GOBIN="$tmp" GOFLAGS=-trimpath go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  GOBIN="$tmp" go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION"
  # kwok needs Stage definitions; the module ships ready ones.
  local kwokdir
  kwokdir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$tmp/kwok-stages"
  local f
  for f in "$kwokdir"/kustomize/stage/node/fast/*.yaml "$kwokdir"/kustomize/stage/node/heartbeat-with-lease/*.yaml "$kwokdir"/kustomize/stage/pod/fast/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    cp "$f" "$tmp/kwok-stages/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  remove_dir "$cache" "/capstan/tools/$key"; mv "$tmp" "$cache"
  log "done"
}

if [ ! -x "$cache/kube-apiserver" ] || [ ! -x "$cache/kwok" ] || [ ! -x "$cache/controller-gen" ]; then
  build
fi
mkdir -p "$root/bin"
for f in "$cache"/*; do ln -sfn "$f" "$root/bin/$(basename "$f")"; done

if [ "${1:-}" = dir ]; then echo "$cache"; fi
