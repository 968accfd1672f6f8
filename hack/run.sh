#!/usr/bin/env bash
# `make run`: builds what is needed, brings up the local cluster with Capstan's CRDs, installs a
# default SimNodeClass and NodePool, and runs Capstan in the foreground on the simulated cloud.
# Ctrl-C stops Capstan and the cluster and removes their state.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
state="${CAPSTAN_STATE_DIR:-$root/.capstan}"
export CAPSTAN_STATE_DIR="$state"
metrics_port=${METRICS_PORT:-8080}
health_port=${HEALTH_PROBE_PORT:-8081}
for port in "$metrics_port" "$health_port"; do
  if port_taken "$port"; then
    echo "[run] port 127.0.0.1:$port is taken (another Capstan or Karpenter?); stop it, or set METRICS_PORT / HEALTH_PROBE_PORT" >&2
    exit 1
  fi
done

"$root/hack/cluster.sh" up
trap '"$root/hack/cluster.sh" down' EXIT
echo "[run] building capstan" >&2
(cd "$root" && go build -o "$root/bin/capstan" ./cmd/capstan)
KUBECONFIG="$state/kubeconfig" kubectl apply -f "$root/examples/nodepool.yaml" >&2

cat <<MSG >&2

Capstan runs on a local cluster with the simulated cloud. In another terminal:

  export KUBECONFIG=$state/kubeconfig
  kubectl apply -f examples/inflate.yaml
  kubectl scale deployment inflate --replicas 20
  kubectl get nodeclaims -w

More workloads in examples/. Press Ctrl-C here to stop Capstan and the cluster.

MSG
"$root/bin/capstan" --kubeconfig "$state/kubeconfig" --disable-leader-election \
  --metrics-bind-address "127.0.0.1:$metrics_port" \
  --health-probe-bind-address "127.0.0.1:$health_port" "$@" || true
