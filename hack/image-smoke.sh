#!/usr/bin/env bash
# `make image-smoke`: runs the image `make image` wrote under podman against a fresh local cluster
# on the simulated cloud — host network, the cluster's kubeconfig mounted read-only — and checks
# that `--version` prints the build's version and commit and that Capstan, from inside the
# container, provisions a pending pod. `make test` runs it. It installs podman and runc with
# apt-get when podman is missing (as root), and fails, saying why, where it cannot.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
layout="${IMAGE_DIR:-$root/bin/image}"
version="${VERSION:?set VERSION to the tag of the image in the layout}"
log() { printf '[image-smoke] %s\n' "$*" >&2; }

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${need[*]} (apt-get)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }; then
      log "apt-get could not install ${need[*]}: the image cannot be run here"
      exit 1
    fi
  elif ! command -v podman >/dev/null; then
    log "podman is not installed and cannot be installed here (needs root and apt-get): install it (Debian: apt-get install podman runc)"
    exit 1
  fi
fi
# runc where it is installed: crun, podman's other runtime, refuses hosts that mix cgroup v1 and
# v2 controllers ("cgroups in hybrid mode"), which runc runs on.
podman=(podman)
if command -v runc >/dev/null; then
  podman+=(--runtime "$(command -v runc)")
fi
# Limits no higher than this shell's: podman gives a root-run container 1,048,576 open files,
# which a host without CAP_SYS_RESOURCE (a Firecracker guest, some CI sandboxes) cannot grant
# ("error setting rlimit type 7: operation not permitted").
nofile=$(ulimit -n)
nproc=$(ulimit -u)
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
run=(run --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
[ -f "$layout/index.json" ] || { log "no image layout at $layout: run make image"; exit 1; }

image=localhost/capstan-smoke:"$version"
id=$("${podman[@]}" pull -q "oci:$layout:$version")
"${podman[@]}" tag "$id" "$image"

if ! out=$("${podman[@]}" "${run[@]}" --rm "$image" --version 2>&1); then
  log "podman could not run the image: $out"
  case "$out" in
    *"cgroups in hybrid mode"*)
      log "the host mixes cgroup v1 and v2 with a controller in v2 (cat /sys/fs/cgroup/unified/cgroup.controllers);" \
        "moving it to v1 clears this, e.g. mkdir /sys/fs/cgroup/hugetlb && mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb" ;;
  esac
  exit 1
fi
commit=$(cd "$root" && git rev-parse HEAD)
case "$out" in
  "capstan $version $commit") log "--version: $out" ;;
  *) log "--version printed '$out', want 'capstan $version $commit'"; exit 1 ;;
esac

state=$(mktemp -d /tmp/capstan-smoke.XXXXXX)
export CAPSTAN_STATE_DIR="$state"
cleanup() {
  "${podman[@]}" rm -f capstan-smoke >/dev/null 2>&1 || true
  "$root/hack/cluster.sh" down >/dev/null 2>&1 || true
  remove_dir "$state" "/${state##*/}"
}
trap cleanup EXIT
"$root/hack/cluster.sh" up
export KUBECONFIG="$state/kubeconfig"
chmod 0644 "$KUBECONFIG"
kubectl apply -f "$root/examples/nodepool.yaml" >&2
"${podman[@]}" "${run[@]}" -d --name capstan-smoke --network host -v "$KUBECONFIG:/etc/capstan/kubeconfig:ro" "$image" \
  --kubeconfig /etc/capstan/kubeconfig --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 >/dev/null
kubectl apply -f "$root/examples/inflate.yaml" >&2
kubectl scale deployment inflate --replicas 1 >&2
if kubectl wait --for=jsonpath='{.status.readyReplicas}'=1 deployment/inflate --timeout=180s >&2; then
  log "a pending pod was provisioned from inside the container: $(kubectl get nodeclaims -o name | tr '\n' ' ')"
else
  log "the pod was not provisioned; Capstan's log:"; "${podman[@]}" logs capstan-smoke 2>&1 | tail -20 >&2; exit 1
fi
