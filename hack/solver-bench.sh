#!/usr/bin/env bash
# Capstan's solver and Karpenter's scheduler on Karpenter's own scheduling benchmark workload,
# one after the other on the same machine: Capstan's BenchmarkKarpenterDiverse (internal/solver)
# and Karpenter's BenchmarkScheduling{1,100,1000,5000,20000}, built from the module
# hack/conformance/go.mod pins (with Go 1.27 and its test_performance tag, outside Capstan's
# module; nothing of it is imported).
#
#   hack/solver-bench.sh            ROUNDS rounds (default 2); each round runs Capstan's 1- and
#                                   100-pod cases 300 times, its larger cases 3 times, and every
#                                   case of Karpenter's once (its benchmark builds a new scheduler
#                                   per pod count and takes minutes at 20,000 pods)
#
# Prints the benchmarks' own lines, Capstan's with its plan (nodes, $/h, cost/LP), Karpenter's
# with its time; timing is the machine's, so compare lines of one run only.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
rounds=${ROUNDS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '[solver-bench] building both benchmarks\n' >&2
(cd "$root" && go test -c -o "$work/capstan.test" ./internal/solver/)
karpenter_go test -c -tags=test_performance -o "$work/karpenter.test" \
  sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling

for r in $(seq "$rounds"); do
  printf '[solver-bench] round %s of %s: Capstan\n' "$r" "$rounds" >&2
  (cd "$root/internal/solver" && "$work/capstan.test" -test.run XXX \
    -test.bench 'KarpenterDiverse$/pods=(1|100)$' -test.benchtime 300x -test.benchmem)
  (cd "$root/internal/solver" && "$work/capstan.test" -test.run XXX \
    -test.bench 'KarpenterDiverse$/pods=(1000|5000|20000)$' -test.benchtime 3x -test.benchmem)
  printf "[solver-bench] round %s of %s: Karpenter\n" "$r" "$rounds" >&2
  kdir=$(karpenter_go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
  (cd "$kdir/pkg/controllers/provisioning/scheduling" && "$work/karpenter.test" -test.run XXX \
    -test.bench 'BenchmarkScheduling(1|100|1000|5000|20000)$' -test.benchtime 1x)
done
