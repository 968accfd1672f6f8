#!/usr/bin/env bash
# Karpenter's own end-to-end suites, unchanged, against Capstan: an external conformance test.
#
#   hack/conformance.sh SUITE [FOCUS]     SUITE: regression, disruption or all (both, one after
#                                         the other); FOCUS: a Ginkgo regexp of the specs to run
#                                         (default: all of the suite)
#
# The suites' test binaries are built from Karpenter's module at the version hack/conformance/go.mod
# pins (every module's hash in its go.sum), outside Capstan's module, with Go 1.27 (Karpenter v1.15
# needs it: GOTOOLCHAIN=go1.27.3, which the go command fetches from the module proxy), and cached
# under ~/.cache/capstan/conformance/<hash of the pins>/. A fresh local cluster (hack/cluster.sh,
# its own state directory) runs Capstan on the simulated cloud with Karpenter's kwok menu
# (kube-system/karpenter-kwok-types); the suites get hack/conformance/nodeclass.yaml and
# nodepool.yaml as their defaults (--default-nodeclass, --default-nodepool). The repair specs
# inject the simulated cloud's fault, SimulatedUnhealthy=True (--repair-condition); the reboot
# specs have none to inject (Capstan does not reboot nodes) and skip themselves.
#
# SKIP is a Ginkgo regexp of specs to leave out; CONFORMANCE_TIMEOUT bounds the run (default 3h);
# CONFORMANCE_NODECLASS replaces the default node class (hack/conformance/nodeclass-c2x.yaml: the
# 2-CPU types the CapacityBuffer specs narrow Karpenter's kwok pools to).
# FEATURE_GATES is passed to Capstan; by default the
# gates Karpenter's own end-to-end runs turn on (NodeRepair, CapacityBuffer, StaticCapacity, its
# Makefile's HELM_OPTS). Logs, the JUnit
# report and Capstan's log go to CONFORMANCE_OUT (default /tmp/capstan-conformance-SUITE). The last
# lines printed are one per spec (passed, failed, skipped) and the counts; the exit status is the
# suite's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
suite=${1:?usage: $0 regression|disruption|all [FOCUS]}
focus=${2:-}
case "$suite" in
  regression|disruption) ;;
  all)
    # Both suites, one after the other, each on a fresh cluster; fails if either does.
    rc=0
    "$0" regression "$focus" || rc=$?
    "$0" disruption "$focus" || rc=$?
    exit "$rc" ;;
  *) echo "[conformance] suite $suite: want regression, disruption or all" >&2; exit 2 ;;
esac
out=${CONFORMANCE_OUT:-/tmp/capstan-conformance-$suite}
state=${CAPSTAN_STATE_DIR:-/tmp/capstan-conformance-state-$suite}
mod="$root/hack/conformance"
log() { printf '[conformance] %s\n' "$*" >&2; }

# The suites need Go 1.27; Capstan builds with the machine's Go.
suites_go() { (cd "$mod" && GOTOOLCHAIN=go1.27.3 GOFLAGS=-mod=readonly go "$@"); }
key=$( { cat "$mod/go.mod" "$mod/go.sum"; echo "$suite"; } | sha256sum | cut -c1-16)
bin="$cache_home/capstan/conformance/$key/$suite.test"
if [ ! -x "$bin" ]; then
  log "building Karpenter's $suite suite (once per pin; a few minutes)"
  mkdir -p "$(dirname "$bin")"
  suites_go test -c -o "$bin.tmp.$$" "sigs.k8s.io/karpenter/test/suites/$suite"
  mv "$bin.tmp.$$" "$bin"
fi
kdir=$(suites_go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
menu="$kdir/kwok/cloudprovider/instance_types.json"

mkdir -p "$out"
gates=${FEATURE_GATES:-NodeRepair=true,CapacityBuffer=true,StaticCapacity=true}
unset FEATURE_GATES
export CAPSTAN_STATE_DIR="$state" KUBECONFIG="$state/kubeconfig"
pid=
sched_conf=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  cp "$state/logs/"*.log "$out/" 2>/dev/null || true
  "$root/hack/cluster.sh" down
  if [ -n "$sched_conf" ]; then rm -rf "$(dirname "$sched_conf")"; fi
}
trap cleanup EXIT
"$root/hack/cluster.sh" down

# The kube-scheduler configuration of Karpenter's kind cluster (a second profile,
# topology-spread-defaults, with default topology spread constraints): the regression suite's
# DefaultTopologySpreadConstraints specs read it from their own copy and look for its path in the
# command of the kube-system pod labelled component=kube-scheduler. Its path is under /etc, so
# only root gives it; otherwise those specs skip themselves. The disruption suite does not look
# for it, so a disruption run may go on beside a regression run.
sched_path=/etc/kubernetes/karpenter-scheduler-config/kube-scheduler-config.yaml
if [ "$suite" = regression ]; then
  if mkdir -p "$(dirname "$sched_path")" 2>/dev/null && [ -w "$(dirname "$sched_path")" ]; then
    sched_conf=$sched_path
    { sed "s#kubeconfig: /etc/kubernetes/scheduler.conf#kubeconfig: $KUBECONFIG#" "$kdir/test/suites/regression/testdata/kube-scheduler-config.yaml"
      printf 'leaderElection:\n  leaderElect: false\n'; } >"$sched_conf"
    export KUBE_SCHEDULER_CONFIG=$sched_conf
  else
    log "cannot write $sched_path (not root): the DefaultTopologySpreadConstraints specs will skip themselves"
  fi
fi
"$root/hack/cluster.sh" up
kubectl create configmap karpenter-kwok-types -n kube-system --from-file=instance_types.json="$menu" >/dev/null
(cd "$root" && go build -o "$root/bin/capstan" ./cmd/capstan && go build -o "$root/bin/follow" ./hack/follow)

# Karpenter as the suites expect to find it: the Deployment kube-system/karpenter, its pod on a
# tainted control-plane node that kwok simulates. The suites change Karpenter's settings through
# the Deployment's environment and wait for its rollout and for the new pod to hold the lease
# karpenter-leader-election; hack/follow runs Capstan on the host as that pod (its environment,
# its name as hostname), restarting it when a rollout brings up another.
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: capstan-control-plane
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {node-role.kubernetes.io/control-plane: "", kubernetes.io/os: linux, kubernetes.io/hostname: capstan-control-plane}
spec:
  taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: karpenter
  namespace: kube-system
  labels: {app.kubernetes.io/name: karpenter, app.kubernetes.io/instance: karpenter}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: karpenter, app.kubernetes.io/instance: karpenter}
  template:
    metadata:
      labels: {app.kubernetes.io/name: karpenter, app.kubernetes.io/instance: karpenter}
    spec:
      nodeSelector: {node-role.kubernetes.io/control-plane: ""}
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists}]
      containers:
        - name: controller
          image: capstan.dev/capstan:local
          env:
            - {name: FEATURE_GATES, value: "$gates"}
            - {name: LEADER_ELECTION_NAME, value: karpenter-leader-election}
EOF
if [ -n "$sched_conf" ]; then
  # The kube-system pod that shows the kube-scheduler's command, as a kind cluster's static pod's
  # mirror does: the local cluster's scheduler process, its arguments read from /proc.
  sched_args=
  for p in $(pgrep -x kube-scheduler); do
    if tr '\0' '\n' <"/proc/$p/cmdline" | grep -qxF -- "--kubeconfig=$KUBECONFIG"; then
      sched_args=$(tr '\0' '\n' <"/proc/$p/cmdline" | awk '{printf "%s\"%s\"", (NR > 1 ? ", " : ""), $0}')
    fi
  done
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler-capstan-control-plane
  namespace: kube-system
  labels: {component: kube-scheduler, tier: control-plane}
spec:
  nodeName: capstan-control-plane
  tolerations: [{operator: Exists}]
  containers: [{name: kube-scheduler, image: registry.k8s.io/kube-scheduler, command: [$sched_args]}]
EOF
fi
log "capstan (FEATURE_GATES=$gates, as kube-system/karpenter's pod) and Karpenter's $suite suite (focus: ${focus:-all}; skip: ${SKIP:-none}); logs in $out"
(cd "$state" && exec "$root/bin/follow" --kubeconfig "$KUBECONFIG" --capstan "$root/bin/capstan" --log "$out/capstan.log" -- \
  --kubeconfig "$KUBECONFIG" --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0) >>"$out/capstan.log" 2>&1 &
pid=$!
holder=
for _ in $(seq 1 120); do
  holder=$(kubectl get lease -n kube-system karpenter-leader-election -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  case "$holder" in karpenter-*) break ;; esac
  sleep 1
done
case "$holder" in
  karpenter-*) log "Capstan holds the lease as pod ${holder%%_*}" ;;
  *) log "Capstan did not take the lease karpenter-leader-election within 2 minutes; see $out/capstan.log"; exit 1 ;;
esac

rc=0
# Ginkgo's own timeout ends the suite with its report written (a test binary's -test.timeout kills it
# without one); what runs past it is reported as not run.
(cd "$out" && "$bin" -test.timeout 0 -ginkgo.timeout "${CONFORMANCE_TIMEOUT:-3h}" -ginkgo.grace-period 1m \
  --default-nodeclass "${CONFORMANCE_NODECLASS:-$mod/nodeclass.yaml}" --default-nodepool "$mod/nodepool.yaml" \
  --repair-condition SimulatedUnhealthy=True \
  -ginkgo.focus "$focus" -ginkgo.skip "${SKIP:-}" -ginkgo.v -ginkgo.no-color \
  -ginkgo.junit-report "$out/junit.xml") >"$out/suite.log" 2>&1 || rc=$?

# One line per spec from the JUnit report: its outcome (passed, failed, skipped — by the spec
# itself, with its reason —, not-run — left out by FOCUS or SKIP —, or interrupted and timedout
# when the run was cut short) and its name.
if [ -f "$out/junit.xml" ]; then
  awk '
    /<testcase name="/ {
      name = $0; sub(/.*<testcase name="/, "", name); sub(/".*/, "", name)
      status = $0; sub(/.*status="/, "", status); sub(/".*/, "", status); why = ""
    }
    /<skipped message="/ {
      m = $0; sub(/.*<skipped message="/, "", m); sub(/">.*/, "", m)
      if (m == "skipped") status = "not-run"; else { why = m; sub(/^skipped - /, "", why) }
    }
    /<\/testcase>/ {
      if (name !~ /^\[(BeforeSuite|AfterSuite|ReportAfterSuite)\]/) print status "\t" name (why == "" ? "" : "\t" why)
    }' "$out/junit.xml" | sed "s/&#39;/'/g; s/&#34;/\"/g; s/&amp;/\\&/g; s/&lt;/</g; s/&gt;/>/g" | sort | tee "$out/specs.tsv" | grep -v '^not-run' || true
  # The counts of each outcome (interrupted and timedout too, when the run was cut short).
  cut -f1 "$out/specs.tsv" | sort | uniq -c | awk '{printf "%s %s  ", $1, $2} END {print ""}'

else
  tail -30 "$out/suite.log"
fi
exit "$rc"
