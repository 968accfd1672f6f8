#!/usr/bin/env bash
# Fails when generated files differ from what the generators produce, when Go files are not
# gofmt'ed, when go vet complains, when api/ imports more than the Kubernetes API packages, or
# when a deciding package reaches an API client, a provider-neutral package a provider's API, or a
# function grows past its length.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
cd "$root"

status=0
# Regenerate, and compare with what was there before.
before=$(mktemp -d); trap 'rm -rf "$before"' EXIT
generated=$( { git ls-files -co --exclude-standard -- 'api/**/zz_generated.*' 'config/crd/*.yaml' 'charts/capstan-crd/templates/*.yaml' 'charts/capstan/README.md'; } | sort -u)
for f in $generated; do mkdir -p "$before/$(dirname "$f")"; cp "$f" "$before/$f"; done
rm -f config/crd/*.yaml charts/capstan-crd/templates/*.yaml
bin/controller-gen object paths=./api/...
bin/controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd
hack/crd-patterns.sh
go run ./hack/crd-schema config/crd
hack/crd-chart.sh
go run ./hack/chart-readme charts/capstan
after=$( { git ls-files -co --exclude-standard -- 'api/**/zz_generated.*' 'config/crd/*.yaml' 'charts/capstan-crd/templates/*.yaml' 'charts/capstan/README.md'; } | sort -u)
if [ "$generated" != "$after" ]; then
  echo "generated files were added or removed (now in the tree; commit them):" >&2
  diff <(echo "$generated") <(echo "$after") >&2 || true
  status=1
fi
for f in $after; do
  if ! cmp -s "$f" "$before/$f"; then
    echo "$f was out of date (regenerated now; commit it):" >&2
    diff -u "$before/$f" "$f" | head -40 >&2 || true
    status=1
  fi
done

unformatted=$(gofmt -l $(git ls-files -co --exclude-standard '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; status=1
fi

go vet ./... || status=1

# go.mod and go.sum say exactly what the code imports. (hack/tools is a build of upstream mains
# whose go.sum pins every module it compiles; tidying it would fetch all their test modules.)
if ! diff=$(go mod tidy -diff 2>&1); then
  echo "go mod tidy would change go.mod or go.sum (run it and commit):" >&2
  echo "$diff" | head -40 >&2
  status=1
fi

# staticcheck, pinned in hack/tools/pins/staticcheck and built by hack/tools.sh.
"$root/bin/staticcheck" ./... || status=1

# api/ holds only API types: it may import the standard library and Kubernetes' API packages.
bad=$(go list -f '{{range .Imports}}{{.}}{{"\n"}}{{end}}' ./api/... | sort -u |
  grep -Ev '^(k8s\.io/api/|k8s\.io/apimachinery/|capstan\.dev/capstan/api/)' | grep '\.' || true)
if [ -n "$bad" ]; then
  echo "api/ imports packages other than Kubernetes' API packages:" >&2; echo "$bad" >&2; status=1
fi

# The deciding packages (the solver, the decision core and what they read claims, pools, pods
# and buffers with) make no API call: neither they nor anything they import, directly or through
# another package, may import client-go or controller-runtime. Reading and writing objects is
# for the controllers and the *store packages.
deciding=(./internal/solver/... ./internal/disruptionplan ./internal/requirements ./internal/lp ./internal/nodeclaims
  ./internal/nodepools ./internal/capacitybuffer ./internal/provreq ./internal/pods ./internal/volumetopology ./internal/replay)
for pkg in "${deciding[@]}"; do
  [ -e "${pkg%/...}" ] || continue
  for p in $(go list "$pkg"); do
    via=$(go list -deps -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' "$p" |
      awk '$1 !~ /^(k8s\.io\/client-go|sigs\.k8s\.io\/controller-runtime)(\/|$)/ {
        for (i = 2; i <= NF; i++) if ($i ~ /^(k8s\.io\/client-go|sigs\.k8s\.io\/controller-runtime)(\/|$)/) print $1 " imports " $i}' | sort -u | head -5)
    if [ -n "$via" ]; then
      echo "$p, a deciding package, reaches an API client (it must make no API call):" >&2; echo "$via" >&2; status=1
    fi
  done
done
# The provider-neutral core (the CloudProvider interface, the deciding packages, the controllers
# that are not one provider's) imports no provider's API (api/aws/..., api/sim/...), directly or
# through another package: a provider's labels and kinds reach it through internal/cloudprovider.
neutral=(./internal/cloudprovider "${deciding[@]}" ./internal/controllers/...)
for pkg in "${neutral[@]}"; do
  [ -e "${pkg%/...}" ] || continue
  for p in $(go list "$pkg"); do
    case "$p" in
      # The solver's benchmark workloads draw from the EC2 catalog; the AWS and simulated
      # clouds' own controllers are theirs.
      */solver/workload|*/controllers/ec2nodeclass|*/controllers/interruption|*/controllers/nodeclaim/tagging|*/controllers/simnodeclass) continue ;;
    esac
    via=$(go list -deps -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' "$p" |
      awk '{for (i = 2; i <= NF; i++) if ($i ~ /^capstan\.dev\/capstan\/api\/(aws|sim)\//) print $1 " imports " $i}' | sort -u | head -5)
    if [ -n "$via" ]; then
      echo "$p, a provider-neutral package, reaches a provider's API:" >&2; echo "$via" >&2; status=1
    fi
  done
done
# No function of what ships is longer than 100 lines, nor 80 in the AWS provider's parts and the
# operator's wiring.
go run ./hack/funclen -strict internal/cloudprovider/aws,internal/operator cmd internal || status=1
# What ships (cmd/, internal/) builds on no test code: test/ may import internal/, not the reverse.
bad=$(go list -deps ./cmd/... ./internal/... | grep '^capstan\.dev/capstan/test/' || true)
if [ -n "$bad" ]; then
  echo "cmd/ or internal/ imports test code:" >&2; echo "$bad" >&2; status=1
fi
exit $status
