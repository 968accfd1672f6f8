#!/usr/bin/env bash
# `make run`: brings up the local cluster with Capstan's CRDs and keeps it up until Ctrl-C.
# The controllers that act on NodePools (provisioning, lifecycle, termination) are not written yet
# (issue 4); until then this is a cluster to apply and inspect Capstan's APIs on.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state="${CAPSTAN_STATE_DIR:-$root/.capstan}"

"$root/hack/cluster.sh" up
trap '"$root/hack/cluster.sh" down' EXIT INT TERM
cat <<MSG

Capstan's local cluster is up: etcd, kube-apiserver (with the NodePool, NodeClaim, EC2NodeClass
and SimNodeClass CRDs), kube-controller-manager, kube-scheduler and kwok, on loopback.

  export KUBECONFIG=$state/kubeconfig
  kubectl get nodepools,nodeclaims,ec2nodeclasses,simnodeclasses
  kubectl apply -f examples/nodepool.yaml

Capstan's controllers are not part of this build yet: NodePools are stored and validated, but no
machines are launched. Component logs are in $state/logs/. Press Ctrl-C to stop and clean up.
MSG
while kill -0 "$(cat "$state/localcluster.pid")" 2>/dev/null; do sleep 1; done
echo "the local cluster stopped; see $state/localcluster.log" >&2
