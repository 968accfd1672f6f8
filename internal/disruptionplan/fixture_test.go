package disruptionplan_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/solver"
)

// t0 is the fixtures' clock.
var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// shape is a fixture instance type: CPUs, GiB, on-demand and spot price.
type shape struct {
	name      string
	cpu, gib  int64
	od, spotP float64
}

var shapes = []shape{
	{"s", 2, 4, 0.05, 0.02},
	{"m", 4, 8, 0.10, 0.04},
	{"l", 8, 16, 0.20, 0.08},
	{"xl", 16, 32, 0.40, 0.16},
}

// catalog is the fixture's instance types, without overhead, in zones z1 and z2.
func catalog() []*cloudprovider.InstanceType {
	var out []*cloudprovider.InstanceType
	for _, s := range shapes {
		var offs []cloudprovider.Offering
		for _, z := range []string{"z1", "z2"} {
			offs = append(offs,
				cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeOnDemand, Price: s.od, Available: true},
				cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeSpot, Price: s.spotP, Available: true})
		}
		out = append(out, cloudprovider.NewInstanceType(s.name,
			map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureAmd64, karpv1.OSLabelKey: karpv1.OSLinux},
			corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(s.cpu, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(s.gib<<30, resource.BinarySI),
				corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
			}, nil, offs))
	}
	return out
}

// cluster builds snapshots.
type cluster struct {
	t    *testing.T
	its  []*cloudprovider.InstanceType
	snap *disruptionplan.Snapshot
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, its: catalog(), snap: &disruptionplan.Snapshot{Now: t0}}
}

// pool adds a NodePool (WhenEmptyOrUnderutilized, consolidateAfter 0s, one budget of 100%
// unless edit changes them).
func (c *cluster) pool(name string, edit func(np *karpv1.NodePool)) {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Disruption = karpv1.Disruption{
		ConsolidateAfter:    karpv1.NewDuration(0),
		ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
		Budgets:             []karpv1.Budget{{Nodes: "100%"}},
	}
	if edit != nil {
		edit(np)
	}
	reqs, err := nodepools.Requirements(np)
	if err != nil {
		c.t.Fatal(err)
	}
	c.snap.NodePools = append(c.snap.NodePools, disruptionplan.Pool{NodePool: np,
		Solver: solver.NodePool{Name: name, Requirements: reqs, InstanceTypes: c.its, Taints: np.Spec.Template.Spec.Taints}})
}

// node adds an initialized, Ready, consolidatable node of the pool, of type shape and capacity
// type ct in zone z1, with the pods bound to it.
func (c *cluster) node(pool, name, shape, ct string, pods ...*corev1.Pod) *disruptionplan.Node {
	var it *cloudprovider.InstanceType
	for _, x := range c.its {
		if x.Name == shape {
			it = x
		}
	}
	if it == nil {
		c.t.Fatalf("no shape %s", shape)
	}
	labels := map[string]string{
		karpv1.NodePoolLabelKey: pool, karpv1.InstanceTypeLabelKey: shape, karpv1.ZoneLabelKey: "z1",
		karpv1.CapacityTypeLabelKey: ct, karpv1.ArchLabelKey: karpv1.ArchitectureAmd64, karpv1.OSLabelKey: karpv1.OSLinux,
		corev1.LabelHostname: name,
	}
	created := metav1.NewTime(t0.Add(-24 * time.Hour))
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: created}}
	nc.Status.ProviderID = "sim://" + name
	nc.Status.NodeName = name
	nc.Status.Capacity, nc.Status.Allocatable = it.Capacity, it.Allocatable()
	for _, t := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeConsolidatable} {
		nc.Status.Conditions = append(nc.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: t, LastTransitionTime: created})
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: created},
		Spec:   corev1.NodeSpec{ProviderID: nc.Status.ProviderID},
		Status: corev1.NodeStatus{Capacity: it.Capacity, Allocatable: it.Allocatable(), Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, p := range pods {
		p.Spec.NodeName = name
		p.Status.Phase = corev1.PodRunning
	}
	node := &disruptionplan.Node{NodeClaim: nc, Node: n, Pods: pods}
	c.snap.Nodes = append(c.snap.Nodes, node)
	return node
}

// starting makes the node one whose claim was created ago and has not initialized.
func starting(n *disruptionplan.Node, ago time.Duration) {
	n.NodeClaim.CreationTimestamp = metav1.NewTime(t0.Add(-ago))
	meta.RemoveStatusCondition(&n.NodeClaim.Status.Conditions, karpv1.ConditionTypeInitialized)
}

// pod is a running pod of ReplicaSet "rs-<app>" requesting cpu and 1Gi per CPU.
func pod(name, app, cpu string) *corev1.Pod {
	q := resource.MustParse(cpu)
	mem := resource.NewQuantity(q.MilliValue()*(1<<30)/1000, resource.BinarySI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: map[string]string{"app": app},
			CreationTimestamp: metav1.NewTime(t0.Add(-12 * time.Hour)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + app,
				UID: types.UID("rs-" + app), Controller: new(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q, corev1.ResourceMemory: *mem}}}}},
	}
}

// pods makes n pods of the app, each requesting cpu.
func pods(app string, n int, cpu string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = pod(fmt.Sprintf("%s-%d", app, i), app, cpu)
	}
	return out
}

// pdb adds a PodDisruptionBudget over the app that allows the given disruptions.
func (c *cluster) pdb(app string, allowed int32) {
	c.snap.PDBs = append(c.snap.PDBs, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	})
}

func (c *cluster) decide(opts disruptionplan.Options) *disruptionplan.Decision {
	return disruptionplan.Decide(c.snap, opts)
}

// names are the candidates' names of the command, or nil.
func names(cmd *disruptionplan.Command) []string {
	if cmd == nil {
		return nil
	}
	var out []string
	for _, c := range cmd.Candidates {
		out = append(out, c.Name())
	}
	return out
}

// explanation returns the message explaining the node, or "".
func explanation(d *disruptionplan.Decision, node string) (event, msg string) {
	for _, e := range d.Explanations {
		if e.Node.Name() == node {
			return e.Event, e.Message
		}
	}
	return "", ""
}

func resourceQ(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
