#!/usr/bin/env bash
# hack/fuzz.sh [FUZZTIME]: runs every fuzz target of the module for FUZZTIME each (default 30s;
# `make test` runs them for 3s, `make fuzz` for FUZZTIME). `go test` alone runs only their seed
# corpora. A failing input is written under the package's testdata/fuzz/ and fails the run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
fuzztime=${1:-30s}
# Each target: package and function (found by name, so a new target is run without listing it).
mapfile -t targets < <(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
  pkg=$(dirname "$f")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |$pkg |"
done | sort)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# fuzz_once PKG FN fuzzes one target for $fuzztime, its output in $out. Each new interesting
# input is minimised for at most 100 runs (Go's default is a minute): on inputs of kilobytes,
# such as the trace files, minimising held the workers for seconds at a time (no input run,
# "0/sec"), and a short run whose time ran out then failed with "context deadline exceeded".
fuzz_once() { go test -run XXX -fuzz "^$2\$" -fuzztime "$fuzztime" -fuzzminimizetime "${FUZZMINIMIZETIME:-100x}" "$1" >"$out" 2>&1; }
for t in "${targets[@]}"; do
  read -r pkg fn <<<"$t"
  printf '[fuzz] %s %s (%s)\n' "$pkg" "$fn" "$fuzztime" >&2
  ok=true
  fuzz_once "$pkg" "$fn" || ok=false
  # The Go fuzzer can fail a run whose time ran out while a worker was busy ("context deadline
  # exceeded", no failing input written): a fault of the fuzzer, not of the target. Once, the
  # target is fuzzed again; a failing input is never retried.
  if ! $ok && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
    echo "[fuzz] $pkg $fn: the fuzzer ran out of time with no failing input; fuzzing it once more" >&2
    ok=true
    fuzz_once "$pkg" "$fn" || ok=false
  fi
  if ! $ok; then
    # The fuzzer's own words say why (a failing input, or the fuzzer itself failing).
    echo "[fuzz] $pkg $fn failed: go test -run XXX -fuzz '^$fn\$' $pkg; its last lines:" >&2
    tail -n 30 "$out" >&2
    go test -run "^$fn\$" "$pkg"
    exit 1
  fi
done
