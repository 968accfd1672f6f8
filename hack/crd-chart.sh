#!/usr/bin/env bash
# Copies the generated CRDs (config/crd) into the capstan-crd chart's templates, adding the
# chart's additionalAnnotations (Karpenter's karpenter-crd chart has the same value) to each
# CRD's metadata.annotations.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/charts/capstan-crd/templates"
rm -f "$out"/*.yaml
for f in "$root"/config/crd/*.yaml; do
  # controller-gen writes metadata.annotations first, at two spaces: the first such line.
  awk 'done == 0 && $0 == "  annotations:" { print; print "    {{- with .Values.additionalAnnotations }}"; print "    {{- toYaml . | nindent 4 }}"; print "    {{- end }}"; done = 1; next } { print }' \
    "$f" > "$out/$(basename "$f")"
  grep -q '^    {{- with .Values.additionalAnnotations }}$' "$out/$(basename "$f")" || { echo "crd-chart: $f has no metadata.annotations line" >&2; exit 1; }
done
