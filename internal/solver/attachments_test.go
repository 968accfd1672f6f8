package solver_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// An existing node takes no more CSI volumes of a driver than its CSINode publishes; new
// machines are not limited, and the cloud is never asked for attachments.
func TestCSIAttachLimitsOfExistingNodes(t *testing.T) {
	bound := workload.Pod("bound", "100m", "128Mi", nil)
	n := node("n1", "test-zone-1", "16", bound)
	n.VolumeLimits = map[string]int64{"ebs.csi.aws.com": 2}
	pending := pods(3, "db", "100m", "128Mi", nil)
	att := map[types.UID]map[string]int64{bound.UID: {"ebs.csi.aws.com": 1}}
	for _, p := range pending {
		att[p.UID] = map[string]int64{"ebs.csi.aws.com": 1}
	}
	in := solver.Input{Pods: pending, Nodes: []solver.ExistingNode{n}, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(4))}, Attachments: att}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.Bindings) != 1 {
		t.Fatalf("%d pods bound to the node with one attachment left, want 1", len(r.Bindings))
	}
	if len(r.NodeClaims) != 1 || len(r.NodeClaims[0].Pods) != 2 {
		t.Fatalf("want the other two pods on one new machine, got %d claims", len(r.NodeClaims))
	}
	for name := range r.NodeClaims[0].Requests {
		if strings.HasPrefix(string(name), "attachable-volumes") {
			t.Fatalf("claim requests %s from the cloud", name)
		}
	}
	// Without a published limit the node takes them all.
	n.VolumeLimits = nil
	in.Nodes = []solver.ExistingNode{n}
	r = solve(t, in, solver.Options{})
	if len(r.Bindings) != 3 {
		t.Fatalf("%d pods bound to a node without attach limits, want 3", len(r.Bindings))
	}
}

// A new machine takes no more CSI volumes of a driver than its instance type can attach
// (InstanceType.VolumeLimits, what its CSINode will publish): six pods of one EBS volume each on
// types that attach two need three machines, where without the limit one holds them all.
func TestCSIAttachLimitsOfNewMachines(t *testing.T) {
	its := workload.FakeInstanceTypes(8)
	pending := pods(6, "db", "100m", "128Mi", nil)
	att := map[types.UID]map[string]int64{}
	for _, p := range pending {
		att[p.UID] = map[string]int64{"ebs.csi.aws.com": 1}
	}
	in := solver.Input{Pods: pending, NodePools: []solver.NodePool{poolOf(its)}, Attachments: att}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 1 {
		t.Fatalf("%d claims without attach limits, want 1", len(r.NodeClaims))
	}
	for _, it := range its {
		it.VolumeLimits = map[string]int64{"ebs.csi.aws.com": 2, "other.csi.example.com": 1}
	}
	r = solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 3 {
		t.Fatalf("%d claims for six one-volume pods on types attaching two, want 3", len(r.NodeClaims))
	}
	for i, nc := range r.NodeClaims {
		if len(nc.Pods) > 2 {
			t.Errorf("claim %d holds %d one-volume pods, its types attach 2", i, len(nc.Pods))
		}
	}
	// A pod needing more volumes than any type attaches is unschedulable, saying so.
	att[pending[0].UID] = map[string]int64{"ebs.csi.aws.com": 3}
	r = solver.Solve(in, solver.Options{})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "ebs.csi.aws.com") {
		t.Fatalf("unschedulable %+v, want the three-volume pod, its reason naming the driver", r.Unschedulable)
	}
}
