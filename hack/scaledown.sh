#!/usr/bin/env bash
# One scale-down measurement (hack/scaledown) on a fresh local cluster: brings the cluster up in
# its own state directory, starts the autoscaler, runs the scenario, stops everything, and
# leaves the readings in $OUT (default /tmp/scaledown-<scenario>-<policy>.log; the last line is
# a JSON summary).
#
#   MENU=path/to/instance_types.json hack/scaledown.sh 1000-700 WhenEmptyOrUnderutilized
#
# MENU is an instance-type list in the format of Karpenter's kwok provider; Capstan offers it
# through a SimNodeClass (instanceTypesFrom). FEATURE_GATES is passed to the autoscaler as is.
# CAPSTAN_BIN runs that Capstan binary instead of building bin/capstan from the checkout.
# RECORD=FILE saves the settled cluster with `kubectl capstan record` before it is torn down, so
# `kubectl capstan explain --recording FILE` can say afterwards why a node stayed.
#
# MEASURE=leaving runs hack/leaving instead (its scenarios, do-not-disrupt and pdb, in place of the
# scale-down's; the policy is ignored): how long the pods of deleted NodeClaims wait for a machine.
#
# Another autoscaler that speaks Karpenter's v1 API and launches kwok Nodes is measured the same
# way: AUTOSCALER_CMD is its command line (run with KUBECONFIG set, from the state directory),
# EXTRA_CRDS the CRD files it needs beyond Capstan's, NODE_CLASS a manifest of its node class and
# NODE_CLASS_REF that class as group/kind/name. docs/benchmarks.md shows a run of Karpenter's kwok
# provider this way.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
scenario=${1:?usage: $0 1000-300|1000-700|three-step|1cpu-400-100|500m-800-600 WhenEmptyOrUnderutilized|Balanced}
policy=${2:?usage: $0 1000-300|1000-700|three-step|1cpu-400-100|500m-800-600 WhenEmptyOrUnderutilized|Balanced}
: "${MENU:?MENU: the kwok-format instance_types.json both autoscalers offer}"
out=${OUT:-/tmp/scaledown-$scenario-$policy.log}
state=${CAPSTAN_STATE_DIR:-/tmp/scaledown-state}
export CAPSTAN_STATE_DIR=$state
export KUBECONFIG=$state/kubeconfig

log() { printf '[scaledown] %s\n' "$*" >&2; }

measure=${MEASURE:-scaledown}
case "$measure" in scaledown|leaving) ;; *) echo "MEASURE=$measure: want scaledown or leaving" >&2; exit 2 ;; esac
(cd "$root" && go build -o "$root/bin/$measure" "./hack/$measure")
"$root/hack/cluster.sh" down
"$root/hack/cluster.sh" up
pid=
cleanup() {
  if [ -n "${RECORD:-}" ]; then
    (cd "$root" && go run ./cmd/kubectl-capstan record -o "$RECORD") || log "record failed"
  fi
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  "$root/hack/cluster.sh" down
}
trap cleanup EXIT

kubectl create configmap kwok-types -n kube-system --from-file=instance_types.json="$MENU" >/dev/null
for f in ${EXTRA_CRDS:-}; do kubectl apply --server-side --force-conflicts -f "$f" >/dev/null; done
if [ -z "${AUTOSCALER_CMD:-}" ]; then
  capstan=${CAPSTAN_BIN:-$root/bin/capstan}
  [ -n "${CAPSTAN_BIN:-}" ] || (cd "$root" && go build -o "$capstan" ./cmd/capstan)
  kubectl apply -f - >/dev/null <<'YAML'
apiVersion: capstan.dev/v1alpha1
kind: SimNodeClass
metadata: {name: default}
spec:
  instanceTypesFrom: {configMap: {namespace: kube-system, name: kwok-types, key: instance_types.json}}
YAML
  ref=capstan.dev/SimNodeClass/default
  cmd=("$capstan" --kubeconfig "$KUBECONFIG" --disable-leader-election
    --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0)
else
  : "${NODE_CLASS:?NODE_CLASS: the node class manifest of AUTOSCALER_CMD}"
  : "${NODE_CLASS_REF:?NODE_CLASS_REF: that class as group/kind/name}"
  kubectl apply -f "$NODE_CLASS" >/dev/null
  ref=$NODE_CLASS_REF
  read -r -a cmd <<<"$AUTOSCALER_CMD"
fi
log "autoscaler: ${cmd[*]} (FEATURE_GATES=${FEATURE_GATES:-})"
(cd "$state" && exec "${cmd[@]}") >"$state/autoscaler.log" 2>&1 &
pid=$!
"$root/bin/$measure" --menu "$MENU" --scenario "$scenario" --policy "$policy" --node-class "$ref" \
  ${SCALEDOWN_FLAGS:-} | tee "$out"
cp "$state/autoscaler.log" "$out.autoscaler" 2>/dev/null || true
