#!/usr/bin/env bash
# Karpenter's own end-to-end suites, unchanged, against Capstan: an external conformance test.
#
#   hack/conformance.sh SUITE [FOCUS]     SUITE: regression, disruption or all (both at once,
#                                         each on its own cluster); FOCUS: a Ginkgo regexp of the
#                                         specs to run (default: all of the suite)
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
# 2-CPU types the CapacityBuffer specs narrow Karpenter's kwok pools to; a whole regression run —
# no FOCUS, no CONFORMANCE_NODECLASS — runs those specs with it on a cluster of their own).
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
# CONFORMANCE_AUTOSCALER=karpenter-kwok runs Karpenter's own kwok provider (built from the same
# pinned module) in Capstan's place, as the baseline: a spec that fails for it on this cluster
# fails for a reason that is not Capstan's.
autoscaler=${CONFORMANCE_AUTOSCALER:-capstan}
case "$autoscaler" in
  capstan) who=capstan ;;
  karpenter-kwok) who=karpenter ;;
  *) echo "[conformance] CONFORMANCE_AUTOSCALER=$autoscaler: want capstan or karpenter-kwok" >&2; exit 2 ;;
esac
case "$suite" in
  regression)
    # A whole regression run (no FOCUS, no node class chosen) is two runs, each on a fresh
    # cluster: the CapacityBuffer specs with the kwok menu's 2-CPU types
    # (hack/conformance/nodeclass-c2x.yaml), the restriction those specs put on Karpenter's own
    # kwok pools and on no other provider's, and the rest with the whole menu.
    if [ -z "$focus" ] && [ -z "${CONFORMANCE_NODECLASS:-}" ] && [ -z "${CONFORMANCE_PART:-}" ]; then
      base=${CONFORMANCE_OUT:-/tmp/$who-conformance-regression}
      rc=0
      CONFORMANCE_PART=1 CONFORMANCE_OUT=$base SKIP="CapacityBuffer${SKIP:+|$SKIP}" "$0" regression || rc=$?
      CONFORMANCE_PART=2 CONFORMANCE_OUT=$base-capacitybuffer CONFORMANCE_NODECLASS=$root/hack/conformance/nodeclass-c2x.yaml \
        "$0" regression CapacityBuffer || rc=$?
      # The two runs' outcomes as one suite's: each spec once, as the run that ran it says.
      if [ -f "$base/specs.tsv" ] && [ -f "$base-capacitybuffer/specs.tsv" ]; then
        { grep -v '^not-run' "$base-capacitybuffer/specs.tsv" || true
          awk -F'\t' 'NR == FNR { if ($1 != "not-run") ran[$2] = 1; next } !($2 in ran)' \
            "$base-capacitybuffer/specs.tsv" "$base/specs.tsv"; } | sort >"$base/specs-all.tsv"
        printf '[conformance] the regression suite, both runs (%s/specs-all.tsv): ' "$base" >&2
        cut -f1 "$base/specs-all.tsv" | sort | uniq -c | awk '{printf "%s %s  ", $1, $2} END {print ""}'
      fi
      exit "$rc"
    fi ;;
  disruption) ;;
  all)
    # Both suites at once, each on a fresh cluster of its own (the disruption suite writes
    # nothing the regression suite reads): CONFORMANCE_OUT and CAPSTAN_STATE_DIR, when given,
    # are the parents of each suite's. Each suite's console output goes to its run.log; the
    # per-spec lines and counts are printed at the end; fails if either does.
    # suite_out is a suite's output directory.
    suite_out() { if [ -n "${CONFORMANCE_OUT:-}" ]; then echo "$CONFORMANCE_OUT/$1"; else echo "/tmp/$who-conformance-$1"; fi; }
    pids=()
    for s in regression disruption; do
      o=$(suite_out "$s")
      st=${CAPSTAN_STATE_DIR:+$CAPSTAN_STATE_DIR/$s}
      st=${st:-/tmp/$who-conformance-state-$s}
      mkdir -p "$o"
      CONFORMANCE_OUT=$o CAPSTAN_STATE_DIR=$st "$0" "$s" "$focus" >"$o/run.log" 2>&1 &
      pids+=($!)
      printf '[conformance] the %s suite is running; its output: %s/run.log\n' "$s" "$o" >&2
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    for s in regression disruption; do
      o=$(suite_out "$s")
      f=$o/specs.tsv
      if [ -f "$o/specs-all.tsv" ]; then f=$o/specs-all.tsv; fi
      if [ ! -f "$f" ]; then
        printf '[conformance] the %s suite left no report; the end of its output:\n' "$s" >&2
        tail -20 "$o/run.log"
        continue
      fi
      printf '[conformance] the %s suite (%s):\n' "$s" "$f" >&2
      grep -v '^not-run' "$f" || true
      cut -f1 "$f" | sort | uniq -c | awk '{printf "%s %s  ", $1, $2} END {print ""}'
    done
    exit "$rc" ;;
  *) echo "[conformance] suite $suite: want regression, disruption or all" >&2; exit 2 ;;
esac
out=${CONFORMANCE_OUT:-/tmp/$who-conformance-$suite}
state=${CAPSTAN_STATE_DIR:-/tmp/$who-conformance-state-$suite}
mod="$root/hack/conformance"
log() { printf '[conformance] %s\n' "$*" >&2; }

# The suites need Go 1.27 (karpenter_go, hack/lib.sh); Capstan builds with the machine's Go.
key=$( { cat "$mod/go.mod" "$mod/go.sum"; echo "$suite"; } | sha256sum | cut -c1-16)
bin="$cache_home/capstan/conformance/$key/$suite.test"
if [ ! -x "$bin" ]; then
  log "building Karpenter's $suite suite (once per pin; a few minutes)"
  mkdir -p "$(dirname "$bin")"
  karpenter_go test -c -o "$bin.tmp.$$" "sigs.k8s.io/karpenter/test/suites/$suite"
  mv "$bin.tmp.$$" "$bin"
fi
kdir=$(karpenter_go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
menu="$kdir/kwok/cloudprovider/instance_types.json"
if [ "$autoscaler" = karpenter-kwok ]; then
  kwok_bin=$(karpenter_kwok)
fi

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
# Built into the run's state directory: runs side by side must not overwrite a running binary.
(cd "$root" && go build -o "$state/bin/capstan" ./cmd/capstan && go build -o "$state/bin/follow" ./hack/follow)
# What the autoscaler's pod runs with (besides the suites' FEATURE_GATES), its binary and the
# suites' flags that name the cloud: Capstan on the simulated cloud with Karpenter's kwok menu;
# or Karpenter's kwok provider with its own CRDs (in place of Capstan's karpenter.sh ones) and
# its defaults (a KWOKNodeClass; the suites inject kubelet conditions for its repair specs).
if [ "$autoscaler" = karpenter-kwok ]; then
  kubectl apply --server-side --force-conflicts -f "$kdir/pkg/apis/crds/" -f "$kdir/kwok/apis/crds/" >/dev/null
  ports=$(python3 -c 'import socket
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1], end=" ")')
  read -r metrics_port probe_port <<<"$ports"
  pod_env="            - {name: SYSTEM_NAMESPACE, value: kube-system}
            - {name: LEADER_ELECTION_NAMESPACE, value: kube-system}
            - {name: INSTANCE_TYPES_FILE_PATH, value: \"$menu\"}
            - {name: METRICS_PORT, value: \"$metrics_port\"}
            - {name: HEALTH_PROBE_PORT, value: \"$probe_port\"}"
  run_bin=$kwok_bin
  run_args=()
  suite_args=()
else
  pod_env="            - {name: LEADER_ELECTION_NAME, value: karpenter-leader-election}"
  run_bin=$state/bin/capstan
  run_args=(--kubeconfig "$KUBECONFIG" --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0)
  suite_args=(--default-nodeclass "${CONFORMANCE_NODECLASS:-$mod/nodeclass.yaml}" --default-nodepool "$mod/nodepool.yaml"
    --repair-condition SimulatedUnhealthy=True)
fi

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
$pod_env
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
log "$autoscaler (FEATURE_GATES=$gates, as kube-system/karpenter's pod) and Karpenter's $suite suite (focus: ${focus:-all}; skip: ${SKIP:-none}); logs in $out"
(cd "$state" && exec "$state/bin/follow" --kubeconfig "$KUBECONFIG" --capstan "$run_bin" --log "$out/$autoscaler.log" -- \
  "${run_args[@]}") >>"$out/$autoscaler.log" 2>&1 &
pid=$!
holder=
for _ in $(seq 1 120); do
  holder=$(kubectl get lease -n kube-system karpenter-leader-election -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  case "$holder" in karpenter-*) break ;; esac
  sleep 1
done
case "$holder" in
  karpenter-*) log "$autoscaler holds the lease as pod ${holder%%_*}" ;;
  *) log "$autoscaler did not take the lease karpenter-leader-election within 2 minutes; see $out/$autoscaler.log"; exit 1 ;;
esac

rc=0
# Ginkgo's own timeout ends the suite with its report written (a test binary's -test.timeout kills it
# without one); what runs past it is reported as not run.
(cd "$out" && "$bin" -test.timeout 0 -ginkgo.timeout "${CONFORMANCE_TIMEOUT:-3h}" -ginkgo.grace-period 1m \
  "${suite_args[@]}" \
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
