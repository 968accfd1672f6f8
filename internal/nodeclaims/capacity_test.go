package nodeclaims_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/solver/workload"
)

// Candidates skips types by name before checking the rest; it must keep exactly the types whose
// requirements meet the claim's and whose allocatable holds its requests.
func TestCandidatesAreTheTypesThatMeetTheClaim(t *testing.T) {
	its, err := workload.EC2InstanceTypes()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	nonEmpty := 0
	for trial := range 300 {
		var names []string
		for range 1 + r.IntN(60) {
			names = append(names, its[r.IntN(len(its))].Name)
		}
		reqs := []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: names},
		}
		if r.IntN(2) == 0 {
			reqs = append(reqs, karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"amd64"}})
		}
		if r.IntN(3) == 0 {
			// No name requirement: every type is tried on its other keys.
			reqs = reqs[1:]
		}
		nc := &karpv1.NodeClaim{Spec: karpv1.NodeClaimSpec{Requirements: reqs, Resources: karpv1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: *resource.NewMilliQuantity(int64(250*(1+r.IntN(64))), resource.DecimalSI),
		}}}}
		parsed, err := nodepools.FromAPI(reqs)
		if err != nil {
			t.Fatal(err)
		}
		var want []*cloudprovider.InstanceType
		for _, it := range its {
			if it.Requirements.Intersects(parsed) == nil && cloudprovider.Fits(nc.Spec.Resources.Requests, it.Allocatable()) {
				want = append(want, it)
			}
		}
		got := nodeclaims.Candidates(nc, its)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: %d candidates, want %d", trial, len(got), len(want))
		}
		// The expected allocatable is the least of the candidates', resource by resource.
		var least corev1.ResourceList
		for i, it := range want {
			a := it.Allocatable()
			if i == 0 {
				least = a
				continue
			}
			for k, q := range least {
				if o := a[k]; o.Cmp(q) < 0 {
					least[k] = o
				}
			}
		}
		alloc := nodeclaims.ExpectedAllocatable(nc, its)
		if len(alloc) != len(least) {
			t.Fatalf("trial %d: expected allocatable %v, want %v", trial, alloc, least)
		}
		for k, q := range least {
			if a, ok := alloc[k]; !ok || a.Cmp(q) != 0 {
				t.Fatalf("trial %d: expected allocatable of %s is %s, want %s", trial, k, a.String(), q.String())
			}
		}
		if len(want) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty == 0 {
		t.Fatal("no trial had a candidate: the test compared empty lists only")
	}
}

// BenchmarkExpectedAllocatable is what every provisioning pass and disruption round pays per
// claim not launched yet: a claim naming 60 of the EC2 catalog's types.
//
//	go test -run XXX -bench ExpectedAllocatable -benchmem ./internal/nodeclaims/
func BenchmarkExpectedAllocatable(b *testing.B) {
	its, err := workload.EC2InstanceTypes()
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for i := range 60 {
		names = append(names, its[i*len(its)/60].Name)
	}
	nc := &karpv1.NodeClaim{Spec: karpv1.NodeClaimSpec{
		Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: names}},
		Resources:    karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}},
	}}
	for b.Loop() {
		if len(nodeclaims.ExpectedAllocatable(nc, its)) == 0 {
			b.Fatal("no allocatable")
		}
	}
}

// An in-flight claim allowed several zones has no zone label yet: the zones it may launch in are
// its undecided values (its single-valued keys are labels).
func TestInFlightClaimsNameTheZonesTheyMayTake(t *testing.T) {
	its := workload.FakeInstanceTypes(4)
	nc := &karpv1.NodeClaim{}
	nc.Name = "x"
	nc.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: corev1.LabelTopologyZone, Operator: karpv1.NodeSelectorOpIn, Values: []string{"test-zone-1", "test-zone-2"}},
		{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
	}
	nc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	en, ok := nodeclaims.InFlight(nc, its, nil)
	if !ok {
		t.Fatal("no expected allocatable")
	}
	if _, labelled := en.Labels[corev1.LabelTopologyZone]; labelled || !slices.Equal(en.Undecided[corev1.LabelTopologyZone], []string{"test-zone-1", "test-zone-2"}) {
		t.Fatalf("labels %v, undecided %v", en.Labels, en.Undecided)
	}
	if en.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeOnDemand || en.Undecided[karpv1.CapacityTypeLabelKey] != nil {
		t.Fatalf("a decided key: labels %v, undecided %v", en.Labels, en.Undecided)
	}
}
