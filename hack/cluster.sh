#!/usr/bin/env bash
# Starts or stops Capstan's local cluster (etcd, kube-apiserver with Capstan's CRDs,
# kube-controller-manager, kube-scheduler, kwok) on loopback. Both commands are idempotent.
#
#   hack/cluster.sh up     start it in the background; the kubeconfig is .capstan/kubeconfig
#   hack/cluster.sh down   stop it and remove .capstan/
#   hack/cluster.sh status say whether it runs
#
# CAPSTAN_STATE_DIR overrides .capstan/ (the end-to-end tests use their own). KCM_QPS sets the
# kube-controller-manager's API rate (default Kubernetes' 20 requests/s, which bounds how fast a
# Deployment's pods are created: ~50 s for 1,000 pods); e.g. KCM_QPS=500 make cluster-up.
# KUBE_SCHEDULER_CONFIG names a KubeSchedulerConfiguration file for the kube-scheduler (its
# clientConnection.kubeconfig must be the state directory's kubeconfig).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
state="${CAPSTAN_STATE_DIR:-$root/.capstan}"
pidfile="$state/localcluster.pid"

log() { printf '[cluster] %s\n' "$*" >&2; }

running() {
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && [ -f "$state/ready" ]
}

up() {
  case "${KCM_QPS:-0}" in
    ''|*[!0-9]*) log "KCM_QPS=${KCM_QPS}: want a whole number of requests per second (0 keeps Kubernetes' default, 20)"; return 1 ;;
  esac
  if running; then
    log "already running; KUBECONFIG=$state/kubeconfig"
    return 0
  fi
  down quiet
  "$root/hack/tools.sh"
  mkdir -p "$state"
  # The marker lets `down` remove this directory, and nothing it did not make.
  touch "$state/.capstan-state"
  (cd "$root" && go build -o "$root/bin/localcluster" ./hack/localcluster)
  log "starting the local cluster (logs in $state/logs/)"
  setsid "$root/bin/localcluster" --dir "$state" --assets "$root/bin" --kcm-qps "${KCM_QPS:-0}" --scheduler-config "${KUBE_SCHEDULER_CONFIG:-}" >"$state/localcluster.log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  for _ in $(seq 1 240); do
    if [ -f "$state/ready" ]; then
      log "up: export KUBECONFIG=$state/kubeconfig"
      return 0
    fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      log "the local cluster failed to start:"
      tail -n 20 "$state/localcluster.log" >&2
      return 1
    fi
    sleep 0.5
  done
  log "the local cluster did not come up within 120s; see $state/logs/"
  return 1
}

down() {
  if [ -f "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      [ "${1:-}" = quiet ] || log "stopping the local cluster"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      # The process group holds every component; make sure none is left.
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  fi
  if [ -f "$state/.capstan-state" ]; then
    remove_dir "$state" "$(basename "$state")"
  elif [ -e "$state" ]; then
    log "leaving $state alone: it has no .capstan-state marker, so the local cluster did not make it"
  fi
  [ "${1:-}" = quiet ] || log "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if running; then echo "running: KUBECONFIG=$state/kubeconfig"; else echo "not running"; exit 1; fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
