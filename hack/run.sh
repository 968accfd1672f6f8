#!/usr/bin/env bash
# `make run`: builds what is needed, brings up the local cluster with Capstan's CRDs, installs a
# default SimNodeClass and NodePool, and runs Capstan in the foreground on the simulated cloud.
# `make run CLOUD=aws` runs it on the AWS provider instead, against local AWS endpoints
# (test/awsfake) whose instances register as Nodes, with the runbook's orders pool installed.
# Ctrl-C, SIGTERM or SIGHUP — to this script or to the `make` running it — stops Capstan (and the
# local AWS endpoints) and the cluster, and removes their state.
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

# What this script starts in the background, stopped on any exit: bash runs no trap while a
# foreground child runs, so Capstan runs in the background and the script waits for it.
children=()
stop() {
  trap - EXIT INT TERM HUP
  local pid
  for pid in "${children[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${children[@]}"; do wait "$pid" 2>/dev/null || true; done
  "$root/hack/cluster.sh" down
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
# `make` passes SIGTERM on to its recipe, and a terminal's Ctrl-C or hang-up reaches the whole
# process group; a parent that dies without passing anything on (`kill -9` of make) is noticed
# here: when it is gone, this script stops too.
parent=$PPID
( while kill -0 "$parent" 2>/dev/null; do sleep 1; done; kill -HUP $$ 2>/dev/null ) &
children+=($!)

"$root/hack/cluster.sh" up
echo "[run] building capstan" >&2
(cd "$root" && go build -o "$root/bin/capstan" ./cmd/capstan)

if [[ "$cloud" == aws ]]; then
  aws_port=${AWS_FAKE_PORT:-4566}
  if port_taken "$aws_port"; then
    echo "[run] port 127.0.0.1:$aws_port is taken; set AWS_FAKE_PORT" >&2
    exit 1
  fi
  (cd "$root" && go build -o "$root/bin/awsfake" ./test/awsfake/cmd/awsfake && go build -o "$root/bin/kubectl-capstan" ./cmd/kubectl-capstan)
  "$root/bin/awsfake" --listen "127.0.0.1:$aws_port" --kubeconfig "$state/kubeconfig" --cluster-name capstan-local \
    >"$state/awsfake.env" 2>"$state/awsfake.log" &
  children+=($!)
  for _ in $(seq 50); do grep -q SECURITY_GROUP_ID "$state/awsfake.env" 2>/dev/null && break; sleep 0.1; done
  # shellcheck disable=SC1091
  set -a; . "$state/awsfake.env"; set +a
  sed -e "s/\${CLUSTER_NAME}/$CLUSTER_NAME/g" -e "s/\${AMI_ID}/$AMI_ID/g" -e "s/\${SECURITY_GROUP_ID}/$SECURITY_GROUP_ID/g" \
    "$root/examples/aws/orders.yaml" | KUBECONFIG="$state/kubeconfig" kubectl apply -f - >&2
  # The lines between "In another terminal:" and "Press Ctrl-C" run as printed, in order, from
  # the repository's root (test/makerun runs them): the runbook's drill.
  cat <<MSG >&2

Capstan runs on a local cluster with its AWS provider, against local AWS endpoints at
$AWS_ENDPOINT_URL (values, dummy credentials among them, in $state/awsfake.env).
The runbook's orders pool is installed. In another terminal, from $root:

  export KUBECONFIG=$state/kubeconfig
  set -a; . $state/awsfake.env; set +a
  kubectl get ec2nodeclass orders
  kubectl apply -f examples/aws/orders-worker.yaml
  kubectl rollout status deployment/orders-worker --timeout 3m
  kubectl get nodeclaims,nodes
  bin/kubectl-capstan explain nodepool orders --cluster-name "\$CLUSTER_NAME"
  kubectl apply -f examples/aws/spot-drill.yaml
  kubectl rollout status deployment/spot-drill-worker --timeout 3m
  bin/awsfake drill spot --nodepool spot-drill
  bin/awsfake drill dead-letter --nodepool orders
  aws --endpoint-url "\$AWS_ENDPOINT_URL" sqs get-queue-attributes --attribute-names ApproximateNumberOfMessages RedrivePolicy --queue-url "\$(aws --endpoint-url "\$AWS_ENDPOINT_URL" sqs get-queue-url --queue-name "\$INTERRUPTION_QUEUE" --output text)"
  curl -s "\$AWS_ENDPOINT_URL/_awsfake/messages?queue=\$INTERRUPTION_QUEUE-dlq"

docs/aws.md, "The runbook's drill, locally", says what each line shows.
Press Ctrl-C here to stop Capstan, the endpoints and the cluster.

MSG
  "$root/bin/capstan" --kubeconfig "$state/kubeconfig" --disable-leader-election --cloud-provider aws \
    --cluster-name "$CLUSTER_NAME" --interruption-queue "$INTERRUPTION_QUEUE" \
    --metrics-bind-address "127.0.0.1:$metrics_port" \
    --health-probe-bind-address "127.0.0.1:$health_port" "$@" &
  children+=($!)
  wait $! || true
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
  --health-probe-bind-address "127.0.0.1:$health_port" "$@" &
children+=($!)
wait $! || true
