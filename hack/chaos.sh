#!/usr/bin/env bash
# hack/chaos.sh [REGEXP]: runs the chaos suite's full scenarios (test/chaos, test/chaos/aws; REGEXP
# picks some by name, as go test -run), each in a go test process of its own with a local cluster
# of its own, CHAOS_JOBS at a time (default 3), the longest first. Prints a line when each ends
# (its time) and, at the end, every scenario's line of figures; fails when any scenario fails,
# after printing the end of its output. The outputs stay in CHAOS_OUT (default a new directory
# under /tmp). `make chaos` runs it; `make test` runs the short versions of the same scenarios.
#
# The scenarios spend most of their time waiting (launch delays, readiness delays, lease and
# garbage-collection windows, back-offs), so on 2 cores three at a time take little more than a
# third of the time one after the other (19 of 53 minutes; docs/reliability.md has the figures). A cluster of its own also
# keeps one scenario's faults (an API server killed, Capstan killed at a crash point) out of the
# others.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
filter=${1:-.}
jobs=${CHAOS_JOBS:-3}
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "CHAOS_JOBS=$jobs: want a whole number of scenarios at a time, 1 or more" >&2
  exit 2
fi
out=${CHAOS_OUT:-$(mktemp -d /tmp/capstan-chaos-XXXXXX)}
mkdir -p "$out"

# The order to start them in, longest first (their full times on the 2-core VM, docs/reliability.md);
# a scenario not listed starts after these.
order=(TestEvictionsUnderPDBs TestCrashDuringDisruption TestEC2Faults TestCrashDuringLaunchesOnAWS
  TestCloudFaults TestBurstsAgainstLimits TestAPIServerCrashes TestLeaderFailover
  TestCrashDuringLaunches TestInterruptionStorm)

# Each package's test binary, built once; every scenario runs it from the package's directory,
# as go test would.
declare -A binary
for pkg in test/chaos test/chaos/aws; do
  binary[$pkg]="$out/$(echo "$pkg" | tr / -).test"
  go test -c -o "${binary[$pkg]}" "./$pkg"
done

# Every scenario REGEXP selects: "package name" lines, in the order above.
mapfile -t found < <(for pkg in test/chaos test/chaos/aws; do
  # A package with no scenario REGEXP selects is no error (grep finds nothing there).
  (cd "$pkg" && "${binary[$pkg]}" -test.list "$filter") | { grep '^Test' || true; } | sed "s|^|$pkg |"
done)
if [ "${#found[@]}" -eq 0 ]; then
  echo "no chaos scenario matches '$filter'" >&2
  exit 2
fi
scenarios=()
for name in "${order[@]}"; do
  for s in "${found[@]}"; do [ "${s#* }" = "$name" ] && scenarios+=("$s"); done
done
for s in "${found[@]}"; do
  listed=false
  for name in "${order[@]}"; do [ "${s#* }" = "$name" ] && listed=true; done
  $listed || scenarios+=("$s")
done

# run_one PKG NAME runs one full scenario with the package's binary; its output in
# $out/NAME.log, its exit status in $out/NAME.rc.
run_one() {
  local pkg=$1 name=$2 start rc=0
  start=$(date +%s)
  (cd "$pkg" && CAPSTAN_CHAOS=full "${binary[$pkg]}" -test.count=1 -test.timeout=60m -test.v \
    -test.run "^$name\$") >"$out/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$out/$name.rc"
  local took=$(($(date +%s) - start))
  printf '[chaos] %s %s (%dm%02ds)\n' "$([ "$rc" = 0 ] && echo PASS || echo FAIL)" "$name" $((took / 60)) $((took % 60)) >&2
}

start=$(date +%s)
printf '[chaos] %d scenarios, %d at a time; outputs in %s\n' "${#scenarios[@]}" "$jobs" "$out" >&2
running=0
for s in "${scenarios[@]}"; do
  read -r pkg name <<<"$s"
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$pkg" "$name" &
  running=$((running + 1))
done
wait || true
took=$(($(date +%s) - start))

failed=()
for s in "${scenarios[@]}"; do
  name=${s#* }
  grep -h '^chaos: ' "$out/$name.log" || true
  [ "$(cat "$out/$name.rc" 2>/dev/null || echo 1)" = 0 ] || failed+=("$name")
done
printf '[chaos] %d scenarios in %dm%02ds, %d failed\n' "${#scenarios[@]}" $((took / 60)) $((took % 60)) "${#failed[@]}" >&2
for name in "${failed[@]}"; do
  echo "[chaos] $name failed; the end of $out/$name.log:" >&2
  tail -n 40 "$out/$name.log" >&2
done
[ "${#failed[@]}" -eq 0 ]
