package disruptionplan_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
)

// kwokFamily is the "c" family of the menu of the side-by-side with Karpenter's kwok provider:
// n vCPU and 2n GiB for n in 8…96, spot at 0.019 $/vCPU-h and on-demand at 0.0272, in zones z1
// and z2.
func kwokFamily() []*cloudprovider.InstanceType {
	var out []*cloudprovider.InstanceType
	for _, n := range []int64{8, 16, 32, 48, 64, 96} {
		var offs []cloudprovider.Offering
		for _, z := range []string{"z1", "z2"} {
			offs = append(offs,
				cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeOnDemand, Price: 0.0272 * float64(n), Available: true},
				cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeSpot, Price: 0.019 * float64(n), Available: true})
		}
		out = append(out, cloudprovider.NewInstanceType(fmt.Sprintf("c-%dx", n),
			map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureAmd64, karpv1.OSLabelKey: karpv1.OSLinux},
			corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(n, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(2*n<<30, resource.BinarySI),
				corev1.ResourcePods:   *resource.NewQuantity(250, resource.DecimalSI),
			}, nil, offs))
	}
	return out
}

// webPods are n pods of one Deployment ("web"), 500m and 512Mi each, named after their node.
func webPods(node string, n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		p := pod(fmt.Sprintf("web-%s-%d", node, i), "web", "500m")
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("512Mi")
		out[i] = p
	}
	return out
}

// strandedTail is the cluster a scale-in to a quarter left on the kwok family's spot machines:
// two 48-vCPU machines holding 95 pods each, a third holding 8, and a 32-vCPU one holding 2.
func strandedTail(t *testing.T) *cluster {
	c := newCluster(t)
	c.its = kwokFamily()
	c.pool("default", nil)
	c.node("default", "full-1", "c-48x", karpv1.CapacityTypeSpot, webPods("full-1", 95)...)
	c.node("default", "full-2", "c-48x", karpv1.CapacityTypeSpot, webPods("full-2", 95)...)
	c.node("default", "tail-48", "c-48x", karpv1.CapacityTypeSpot, webPods("tail-48", 8)...)
	c.node("default", "tail-32", "c-32x", karpv1.CapacityTypeSpot, webPods("tail-32", 2)...)
	return c
}

// The stranded tail: a scale-in to a quarter left three 48-vCPU spot machines holding 95, 95 and 8
// pods and a 32-vCPU spot machine holding 2 (spot-to-spot replacement off, as by default). Both
// small machines can be emptied into the other, and neither move leaves another: whichever is
// kept stays. Emptying the 32-vCPU machine (2 evictions, the easiest move) leaves the cluster at
// 3 × 48 vCPU for good; emptying the 48-vCPU one (8 evictions) ends at 2 × 48 + 32, 11% cheaper.
// Consolidation must choose by the end state it leaves, not by the easiest step.
func TestStrandedTailMachineIsTheOneEmptied(t *testing.T) {
	c := strandedTail(t)
	cmd := c.decide(disruptionplan.Options{}).Command
	if got := names(cmd); !slices.Equal(got, []string{"tail-48"}) || len(cmd.Replacements) != 0 {
		t.Fatalf("consolidation disrupts %v (replacements %d); want tail-48 deleted, its 8 pods moved onto tail-32", got, len(cmd.Replacements))
	}
}

// emptied makes the node one whose last pod left ago (past the pool's consolidateAfter of 0s):
// it became consolidatable then.
func emptied(n *disruptionplan.Node, ago time.Duration) {
	at := metav1.NewTime(t0.Add(-ago))
	n.NodeClaim.Status.LastPodEventTime = at
	meta.FindStatusCondition(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable).LastTransitionTime = at
}

// The stranded tail with the machine a scale-in emptied still there: a 16-vCPU spot machine,
// empty a minute. Emptiness deleting it (the easy step) leaves 3 × 48 vCPU for good, as above;
// kept, it takes the 10 pods of both tails and the cluster ends at 2 × 48 + 16 vCPU, 22% cheaper.
// Emptiness keeps it, saying why, and consolidation then empties both tails into it.
func TestEmptyMachineIsKeptAsTheDestinationOfDearerTails(t *testing.T) {
	c := strandedTail(t)
	emptied(c.node("default", "empty-16", "c-16x", karpv1.CapacityTypeSpot), time.Minute)
	d := c.decide(disruptionplan.Options{})
	if slices.Contains(names(d.Command), "empty-16") {
		t.Fatalf("the round deletes %v; want empty-16 kept as the tails' destination", names(d.Command))
	}
	if _, msg := explanation(d, "empty-16"); !strings.Contains(msg, "kept as the destination of dearer nodes' pods: the cluster can end at $2.1280/h with it, $2.7360/h without") {
		t.Errorf("empty-16's explanation is %q; want it kept as a destination", msg)
	}
	if got := names(d.Command); !slices.Equal(got, []string{"tail-32", "tail-48"}) || len(d.Command.Replacements) != 0 {
		t.Fatalf("the round disrupts %v; want both tails emptied into empty-16, no launch", got)
	}
	onto := 0
	for _, b := range d.Command.Bindings {
		if b.Node == "empty-16" {
			onto++
		}
	}
	if onto < 8 {
		t.Errorf("%d of the tails' 10 pods go to empty-16; want at least tail-48's 8 (the full machines have room for one each)", onto)
	}
}

// An empty machine is kept as a destination for HoldEmptyFor at most: when the moves it waits for
// have not come by then (a PDB, a budget or a score kept refusing them), emptiness takes it.
func TestEmptyMachineKeptAsDestinationGoesAfterHoldEmptyFor(t *testing.T) {
	for _, tc := range []struct {
		ago  time.Duration
		kept bool
	}{{time.Minute, true}, {disruptionplan.HoldEmptyFor, false}} {
		c := strandedTail(t)
		emptied(c.node("default", "empty-16", "c-16x", karpv1.CapacityTypeSpot), tc.ago)
		d := c.decide(disruptionplan.Options{})
		if deleted := d.Command != nil && d.Command.Method == disruptionplan.MethodEmptiness && slices.Contains(names(d.Command), "empty-16"); deleted == tc.kept {
			t.Errorf("empty for %s: the round's command is %v (%v); want empty-16 kept=%v", tc.ago, names(d.Command), d.Command != nil && d.Command.Method == disruptionplan.MethodEmptiness, tc.kept)
		}
	}
}

// An empty machine no dearer node needs goes at once: here the tails fit on each other's machine
// and on the full ones either way, so keeping the 16-vCPU machine would only cost its price.
func TestEmptyMachineNobodyNeedsIsDeleted(t *testing.T) {
	c := newCluster(t)
	c.its = kwokFamily()
	c.pool("default", nil)
	c.node("default", "half-1", "c-48x", karpv1.CapacityTypeSpot, webPods("half-1", 40)...)
	c.node("default", "half-2", "c-48x", karpv1.CapacityTypeSpot, webPods("half-2", 40)...)
	emptied(c.node("default", "empty-16", "c-16x", karpv1.CapacityTypeSpot), time.Minute)
	d := c.decide(disruptionplan.Options{})
	if got := names(d.Command); d.Command == nil || d.Command.Method != disruptionplan.MethodEmptiness || !slices.Equal(got, []string{"empty-16"}) {
		t.Fatalf("the round disrupts %v; want empty-16 deleted by emptiness", got)
	}
}

// draining marks the node's claim deleted: the node is going away, its pods leaving.
func draining(n *disruptionplan.Node) {
	at := metav1.NewTime(t0.Add(-30 * time.Second))
	n.NodeClaim.DeletionTimestamp = &at
}

// A machine provisioning bought for the pods of a node that drains (a terminationGracePeriod, a
// PDB letting one pod go at a time) is empty until they arrive. Emptiness keeps it, saying why,
// while they are still to come and fit nowhere else; when they fit on the room other nodes have,
// or there are none, it goes as any empty node.
func TestAnEmptyMachineThePodsOfADrainingNodeAreHeadedForIsKept(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaving int
		kept    bool
	}{
		{"ten pods that fit nowhere else", 10, true},
		{"two pods that fit beside others", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.its = kwokFamily()
			c.pool("default", nil)
			c.node("default", "full-48", "c-48x", karpv1.CapacityTypeSpot, webPods("full-48", 92)...)
			draining(c.node("default", "old-16", "c-16x", karpv1.CapacityTypeSpot, webPods("old-16", tc.leaving)...))
			emptied(c.node("default", "new-16", "c-16x", karpv1.CapacityTypeSpot), time.Minute)
			d := c.decide(disruptionplan.Options{})
			deleted := slices.Contains(names(d.Command), "new-16")
			if deleted == tc.kept {
				t.Fatalf("the round disrupts %v; want new-16 kept: %v", names(d.Command), tc.kept)
			}
			// Of ten, those the 48-vCPU machine has no room for go to the new machine.
			if _, msg := explanation(d, "new-16"); tc.kept && !strings.Contains(msg, "pod(s) of nodes going away, which will move here") {
				t.Errorf("new-16 explained as %q, want it kept for the pods of the node going away", msg)
			}
		})
	}
}
