#!/usr/bin/env bash
# Every cell of the scale-down comparison, RUNS times per side, each on a fresh local cluster
# (hack/scaledown.sh), then the medians and ranges per cell and side (hack/scaledown-summary).
#
#   RUNS=3 hack/scaledown-cells.sh
#
# CELLS (default: 1000-300 1000-700 three-step 1cpu-400-100 500m-800-600), POLICIES (default:
# WhenEmptyOrUnderutilized Balanced) and SIDES (default: capstan karpenter) choose what runs; OUT
# (default /tmp/scaledown-cells) holds one directory per side, one file per run
# (<scenario>-<policy>-<n>.log). A run whose file already ends with its summary is not run again,
# so an interrupted comparison resumes where it stopped. Both sides are read for SETTLE (default
# 15m) after the last scale-down: past Capstan's 10-minute falling-load bar and Karpenter's waits.
# Capstan is the checkout (CAPSTAN_BIN=… another binary); Karpenter is its kwok provider, built
# from the module hack/conformance/go.mod pins, with PodDeletionCostManagement on. Both offer
# Karpenter's kwok menu (kwok/cloudprovider/instance_types.json of that module).
#
# Drivers can share the work: each takes a run by locking its file (<run>.log.lock, with the
# driver's PID; a lock whose driver is gone is taken over), runs its clusters in a state directory
# of its own (CAPSTAN_STATE_DIR, default /tmp/scaledown-state-<PID>), and Karpenter's ports are
# picked free. Start the others from `git worktree`s of the same commit with the same OUT (each
# checkout builds its own binaries): the comparison is done about twice as fast with two drivers
# on a 2-core machine, each cluster mostly waiting.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
runs=${RUNS:-3}
cells=${CELLS:-1000-300 1000-700 three-step 1cpu-400-100 500m-800-600}
policies=${POLICIES:-WhenEmptyOrUnderutilized Balanced}
sides=${SIDES:-capstan karpenter}
out=${OUT:-/tmp/scaledown-cells}
settle=${SETTLE:-15m}
export CAPSTAN_STATE_DIR=${CAPSTAN_STATE_DIR:-/tmp/scaledown-state-$$}
log() { printf '[scaledown-cells] %s\n' "$*" >&2; }

kdir=$(karpenter_go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
menu="$kdir/kwok/cloudprovider/instance_types.json"
if [[ " $sides " == *" karpenter "* ]]; then
  kwok_bin=$(karpenter_kwok)
fi
classfile="$out/kwoknodeclass.yaml"
mkdir -p "$out"
printf 'apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\n' >"$classfile"

done_run() { [ -f "$1" ] && tail -n 1 "$1" | grep -q '^{.*"scenario"'; }
# me is this driver: its PID and start time, so that a PID reused after a restart is not taken
# for it.
me="$$ $(cut -d' ' -f22 "/proc/$$/stat")"
alive() { [ -n "$1" ] && [ "$(cut -d' ' -f22 "/proc/$1/stat" 2>/dev/null)" = "$2" ]; }
# claim locks the run file $1 for this driver; it fails when another driver that is still running
# holds it.
claim() {
  local lock="$1.lock" pid start
  if ! mkdir "$lock" 2>/dev/null; then
    read -r pid start <"$lock/owner" 2>/dev/null || true
    if alive "$pid" "$start"; then return 1; fi
    log "taking over the run of a driver that is gone: $1"
  fi
  echo "$me" >"$lock/owner"
}
held=
trap '[ -z "$held" ] || rm -rf "$held"' EXIT
for n in $(seq 1 "$runs"); do
  for cell in $cells; do
    for policy in $policies; do
      for side in $sides; do
        f="$out/$side/$cell-$policy-$n.log"
        mkdir -p "$out/$side"
        if done_run "$f" || ! claim "$f"; then continue; fi
        held="$f.lock"
        log "$side $cell $policy, run $n of $runs"
        case "$side" in
          capstan)
            MENU=$menu OUT=$f SCALEDOWN_FLAGS="--settle $settle" FEATURE_GATES=PodDeletionCostManagement=true \
              "$root/hack/scaledown.sh" "$cell" "$policy" >/dev/null || log "$side $cell $policy run $n failed (see $f)" ;;
          karpenter)
            MENU=$menu OUT=$f SCALEDOWN_FLAGS="--settle $settle" \
              EXTRA_CRDS="$kdir/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml $kdir/pkg/apis/crds/autoscaling.x-k8s.io_capacitybuffers.yaml" \
              NODE_CLASS=$classfile NODE_CLASS_REF=karpenter.kwok.sh/KWOKNodeClass/default \
              AUTOSCALER_CMD="env DISABLE_LEADER_ELECTION=true SYSTEM_NAMESPACE=kube-system INSTANCE_TYPES_FILE_PATH=$menu FEATURE_GATES=PodDeletionCostManagement=true METRICS_PORT=0 HEALTH_PROBE_PORT=0 $kwok_bin" \
              "$root/hack/scaledown.sh" "$cell" "$policy" >/dev/null || log "$side $cell $policy run $n failed (see $f)" ;;
          *) log "SIDES: $side is neither capstan nor karpenter"; exit 2 ;;
        esac
        rm -rf "$held"
        held=
      done
    done
  done
done
dirs=()
for side in $sides; do dirs+=("$out/$side"); done
(cd "$root" && go run ./hack/scaledown-summary "${dirs[@]}")
