#!/usr/bin/env bash
# Karpenter's own end-to-end suites, unchanged, against Capstan: an external conformance test.
#
#   hack/conformance.sh SUITE [FOCUS]     SUITE: regression or disruption; FOCUS: a Ginkgo regexp
#                                         of the specs to run (default: all of the suite)
#
# The suites' test binaries are built from Karpenter's module at the version hack/conformance/go.mod
# pins (every module's hash in its go.sum), outside Capstan's module, with Go 1.27 (Karpenter v1.15
# needs it: GOTOOLCHAIN=go1.27.3, which the go command fetches from the module proxy), and cached
# under ~/.cache/capstan/conformance/<hash of the pins>/. A fresh local cluster (hack/cluster.sh,
# its own state directory) runs Capstan on the simulated cloud with Karpenter's kwok menu
# (kube-system/karpenter-kwok-types); the suites get hack/conformance/nodeclass.yaml and
# nodepool.yaml as their defaults (--default-nodeclass, --default-nodepool).
#
# SKIP is a Ginkgo regexp of specs to leave out; CONFORMANCE_TIMEOUT bounds the run (default 3h).
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
suite=${1:?usage: $0 regression|disruption [FOCUS]}
focus=${2:-}
case "$suite" in regression|disruption) ;; *) echo "[conformance] suite $suite: want regression or disruption" >&2; exit 2 ;; esac
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
menu="$(suites_go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)/kwok/cloudprovider/instance_types.json"

mkdir -p "$out"
export FEATURE_GATES=${FEATURE_GATES:-NodeRepair=true,CapacityBuffer=true,StaticCapacity=true}
export CAPSTAN_STATE_DIR="$state" KUBECONFIG="$state/kubeconfig"
"$root/hack/cluster.sh" down
"$root/hack/cluster.sh" up
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  cp "$state/logs/"*.log "$out/" 2>/dev/null || true
  "$root/hack/cluster.sh" down
}
trap cleanup EXIT
kubectl create configmap karpenter-kwok-types -n kube-system --from-file=instance_types.json="$menu" >/dev/null
(cd "$root" && go build -o "$root/bin/capstan" ./cmd/capstan)
log "capstan (FEATURE_GATES=${FEATURE_GATES:-}) and Karpenter's $suite suite (focus: ${focus:-all}; skip: ${SKIP:-none}); logs in $out"
(cd "$state" && exec "$root/bin/capstan" --kubeconfig "$KUBECONFIG" --disable-leader-election \
  --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0) >"$out/capstan.log" 2>&1 &
pid=$!

rc=0
# Ginkgo's own timeout ends the suite with its report written (a test binary's -test.timeout kills it
# without one); what runs past it is reported as not run.
(cd "$out" && "$bin" -test.timeout 0 -ginkgo.timeout "${CONFORMANCE_TIMEOUT:-3h}" -ginkgo.grace-period 1m \
  --default-nodeclass "$mod/nodeclass.yaml" --default-nodepool "$mod/nodepool.yaml" \
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
