#!/usr/bin/env bash
# Builds the local control plane and the code generators from Go modules, into per-user caches
# keyed by the pins, and links them into bin/. Re-running is cheap: a build happens only when a
# pin changes.
#
# Every version is pinned in a go.mod with its go.sum hashes, nowhere else:
#   hack/tools/go.mod          etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#                              (built from the mains next to it)
#   hack/tools/pins/*/go.mod   kwok, controller-gen, staticcheck, helm, the OCI registry and krew, one module each (a
#                              `tool` directive), so each builds with exactly its own dependencies
#
#   hack/tools.sh            build everything and link it into bin/ (and install Debian's headless
#                            Chromium when missing, for the replay report's screenshot)
#   hack/tools.sh dir        print the directory holding the control plane (building first if needed)
#   hack/tools.sh pins       print the directory holding kwok, controller-gen, staticcheck, helm, registry and krew
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
tools="$root/hack/tools"
pins="$tools/pins"

log() { printf '[tools] %s\n' "$*" >&2; }

# version prints the version a go.mod requires of a module.
version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

KUBE_VERSION=$(version "$tools" k8s.io/kubernetes)
KWOK_VERSION=$(version "$pins/kwok" sigs.k8s.io/kwok)
CONTROLLER_TOOLS_VERSION=$(version "$pins/controller-gen" sigs.k8s.io/controller-tools)
HELM_VERSION=$(version "$pins/helm" helm.sh/helm/v3)
REGISTRY_VERSION=$(version "$pins/registry" github.com/distribution/distribution/v3)

key=$( { cat "$tools/go.mod" "$tools/go.sum" "$tools"/*/main.go; echo "$KUBE_VERSION $KWOK_VERSION $CONTROLLER_TOOLS_VERSION"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)
cache="$cache_home/capstan/tools/$key"
pins_key=$( { cat "$pins"/*/go.mod "$pins"/*/go.sum; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)
pins_cache="$cache_home/capstan/pins/$pins_key"

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

build_control_plane() {
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
  remove_dir "$cache" "/capstan/tools/$key"; mv "$tmp" "$cache"
}

build_pins() {
  local tmp="$pins_cache.tmp.$$"
  remove_dir "$tmp" ".tmp.$$"; mkdir -p "$tmp"
  log "building kwok $KWOK_VERSION, controller-gen $CONTROLLER_TOOLS_VERSION, staticcheck, helm $HELM_VERSION and registry $REGISTRY_VERSION from hack/tools/pins"
  (cd "$pins/kwok" && go build -trimpath -o "$tmp/" sigs.k8s.io/kwok/cmd/kwok)
  (cd "$pins/controller-gen" && go build -trimpath -o "$tmp/" sigs.k8s.io/controller-tools/cmd/controller-gen)
  (cd "$pins/staticcheck" && go build -trimpath -o "$tmp/" honnef.co/go/tools/cmd/staticcheck)
  (cd "$pins/helm" && go build -trimpath -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" -o "$tmp/" helm.sh/helm/v3/cmd/helm)
  # The CNCF distribution registry, for the release test (make release to a registry on loopback).
  (cd "$pins/registry" && go build -trimpath -ldflags "-X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION" -o "$tmp/" github.com/distribution/distribution/v3/cmd/registry)
  # krew, for the release test (the kubectl plugin installed from a release's archive).
  (cd "$pins/krew" && go build -trimpath -o "$tmp/" sigs.k8s.io/krew/cmd/krew)
  # kwok needs Stage definitions; its module ships ready ones.
  local kwokdir
  kwokdir=$(cd "$pins/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$tmp/kwok-stages"
  local f
  for f in "$kwokdir"/kustomize/stage/node/fast/*.yaml "$kwokdir"/kustomize/stage/node/heartbeat-with-lease/*.yaml "$kwokdir"/kustomize/stage/pod/fast/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    cp "$f" "$tmp/kwok-stages/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  remove_dir "$pins_cache" "/capstan/pins/$pins_key"; mv "$tmp" "$pins_cache"
}

if [ ! -x "$cache/kube-apiserver" ] || [ ! -x "$cache/kube-scheduler" ]; then
  build_control_plane
fi
if [ ! -x "$pins_cache/kwok" ] || [ ! -x "$pins_cache/controller-gen" ] || [ ! -x "$pins_cache/staticcheck" ] || [ ! -x "$pins_cache/helm" ] || [ ! -x "$pins_cache/registry" ] || [ ! -x "$pins_cache/krew" ]; then
  build_pins
fi
mkdir -p "$root/bin"
for f in etcd kube-apiserver kube-controller-manager kube-scheduler; do ln -sfn "$cache/$f" "$root/bin/$f"; done
for f in kwok kwok-stages controller-gen staticcheck helm registry krew; do ln -sfn "$pins_cache/$f" "$root/bin/$f"; done

# Headless Chromium, for the replay report's screenshot (hack/screenshot.sh): Debian's package,
# installed when missing and possible (root and apt-get); without it that test says so and fails.
if [ -z "${1:-}" ] && ! command -v chromium-headless-shell >/dev/null && ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing chromium-headless-shell (apt-get)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null; } ||
      log "apt-get could not install chromium-headless-shell: the replay report's screenshot test will fail"
  else
    log "no headless Chromium and no way to install it (needs root and apt-get): the replay report's screenshot test will fail"
  fi
fi

case "${1:-}" in
  dir) echo "$cache" ;;
  pins) echo "$pins_cache" ;;
esac
