#!/usr/bin/env bash
# Narrows the quantity pattern controller-gen writes for every resource.Quantity in the generated
# CRDs (config/crd): Kubernetes' pattern admits any exponent, a fractional one ("1e1.5") that
# resource.ParseQuantity refuses and a huge one ("1e20000000000") that it takes minutes and
# gigabytes to read. The API server would store either, and every typed client listing the
# objects (Capstan's caches) would then fail or stall. Exponents keep to three digits, which
# covers every quantity a cluster holds. api/karpenter/v1 FuzzNodePoolValues checks the result.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wide='[eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))'
narrow='[eE](\+|-)?[0-9]{1,3}'
for f in "$root"/config/crd/*.yaml; do
  WIDE=$wide NARROW=$narrow perl -0pi -e 's/\Q$ENV{WIDE}\E/$ENV{NARROW}/g' "$f"
done
