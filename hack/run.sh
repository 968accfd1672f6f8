#!/usr/bin/env bash
# `make run`: builds what is needed, brings up the local cluster with Capstan's CRDs, installs a
# default SimNodeClass and NodePool, and runs Capstan in the foreground on the simulated cloud.
# `make run CLOUD=aws` runs it on the AWS provider instead, against local AWS endpoints
# (test/awsfake) whose instances register as Nodes, with the runbook's orders pool installed.
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

cloud=${CLOUD:-sim}
case "$cloud" in sim|aws) ;; *) echo "[run] CLOUD=$cloud: want sim or aws" >&2; exit 1 ;; esac

"$root/hack/cluster.sh" up
trap '"$root/hack/cluster.sh" down' EXIT
echo "[run] building capstan" >&2
(cd "$root" && go build -o "$root/bin/capstan" ./cmd/capstan)

if [[ "$cloud" == aws ]]; then
  aws_port=${AWS_FAKE_PORT:-4566}
  if port_taken "$aws_port"; then
    echo "[run] port 127.0.0.1:$aws_port is taken; set AWS_FAKE_PORT" >&2
    exit 1
  fi
  (cd "$root" && go build -o "$root/bin/awsfake" ./test/awsfake/cmd/awsfake)
  "$root/bin/awsfake" --listen "127.0.0.1:$aws_port" --kubeconfig "$state/kubeconfig" --cluster-name capstan-local \
    >"$state/awsfake.env" 2>"$state/awsfake.log" &
  fake_pid=$!
  trap 'kill $fake_pid 2>/dev/null; "$root/hack/cluster.sh" down' EXIT
  for _ in $(seq 50); do grep -q SECURITY_GROUP_ID "$state/awsfake.env" 2>/dev/null && break; sleep 0.1; done
  # shellcheck disable=SC1091
  set -a; . "$state/awsfake.env"; set +a
  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local
  sed -e "s/\${CLUSTER_NAME}/$CLUSTER_NAME/g" -e "s/\${AMI_ID}/$AMI_ID/g" -e "s/\${SECURITY_GROUP_ID}/$SECURITY_GROUP_ID/g" \
    "$root/examples/aws/orders.yaml" | KUBECONFIG="$state/kubeconfig" kubectl apply -f - >&2
  cat <<MSG >&2

Capstan runs on a local cluster with its AWS provider, against local AWS endpoints at
$AWS_ENDPOINT_URL (values in $state/awsfake.env). In another terminal:

  export KUBECONFIG=$state/kubeconfig
  kubectl get ec2nodeclass orders -o yaml        # subnets, security group, AMI, Ready
  kubectl apply -f examples/aws/orders-worker.yaml   # workers that select workload=orders
  kubectl get nodeclaims,nodes -w
  curl -s $AWS_ENDPOINT_URL/_awsfake/instances   # the "EC2" instances
  bin/awsfake drill spot --endpoint $AWS_ENDPOINT_URL --instance i-… --queue $INTERRUPTION_QUEUE

Press Ctrl-C here to stop Capstan, the endpoints and the cluster.

MSG
  "$root/bin/capstan" --kubeconfig "$state/kubeconfig" --disable-leader-election --cloud-provider aws \
    --cluster-name "$CLUSTER_NAME" --interruption-queue "$INTERRUPTION_QUEUE" \
    --metrics-bind-address "127.0.0.1:$metrics_port" \
    --health-probe-bind-address "127.0.0.1:$health_port" "$@" || true
  exit 0
fi

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
