#!/usr/bin/env bash
# `make run`: builds what is needed, brings up the local cluster with Capstan's CRDs, installs a
# default SimNodeClass and NodePool, and runs Capstan in the foreground on the simulated cloud.
# Ctrl-C stops Capstan and the cluster and removes their state.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state="${CAPSTAN_STATE_DIR:-$root/.capstan}"
export CAPSTAN_STATE_DIR="$state"

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
"$root/bin/capstan" --kubeconfig "$state/kubeconfig" --leader-elect=false \
  --sim-state-file "$state/sim-cloud.json" --metrics-bind-address 127.0.0.1:8080 \
  --health-probe-bind-address 127.0.0.1:8081 "$@" || true
