package solver_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/verify"
	"capstan.dev/capstan/internal/solver/workload"
)

// randomInput builds a cluster with a few pools (taints, zone restrictions, limits), some existing
// nodes and deployments of pods with every kind of hard constraint. Each deployment's spread and
// affinity select its own pods, as real workloads do.
func randomInput(r *rand.Rand) solver.Input {
	its := workload.FakeInstanceTypes(40 + r.IntN(60))
	var in solver.Input
	in.NodePools = append(in.NodePools, solver.NodePool{Name: "general", Weight: 10, InstanceTypes: its})
	tainted := solver.NodePool{Name: "tainted", Weight: 50, InstanceTypes: its,
		Taints: []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}}
	tainted.Requirements.Add(requirements.MustNew(corev1.LabelTopologyZone, requirements.In, "test-zone-1", "test-zone-2"))
	tainted.Requirements.Add(requirements.Single("dedicated", "batch"))
	in.NodePools = append(in.NodePools, tainted)
	if r.IntN(2) == 0 {
		in.NodePools[0].Remaining = corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(50+r.IntN(200)), resource.DecimalSI)}
	}
	for i := range r.IntN(4) {
		z := fmt.Sprintf("test-zone-%d", 1+r.IntN(3))
		in.Nodes = append(in.Nodes, solver.ExistingNode{
			Name:   fmt.Sprintf("existing-%d", i),
			Labels: map[string]string{corev1.LabelHostname: fmt.Sprintf("existing-%d", i), corev1.LabelTopologyZone: z, "kubernetes.io/arch": "amd64"},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
				corev1.ResourcePods: resource.MustParse("20")},
		})
	}
	if r.IntN(2) == 0 {
		ds := workload.Pod("ds", "200m", "256Mi", map[string]string{"app": "agent"})
		in.DaemonSetPods = append(in.DaemonSetPods, ds)
	}
	cpus := []string{"100m", "500m", "1", "2", "3500m"}
	mems := []string{"128Mi", "1Gi", "3Gi", "6Gi"}
	for d := range 3 + r.IntN(6) {
		app := fmt.Sprintf("app-%d", d)
		replicas := 1 + r.IntN(25)
		kind := r.IntN(12)
		cpu, mem := cpus[r.IntN(len(cpus))], mems[r.IntN(len(mems))]
		// typeSubset is a random handful of the catalog's type names, for instance-type selectors.
		typeSubset := func() []string {
			var names []string
			for range 1 + r.IntN(6) {
				names = append(names, its[r.IntN(len(its))].Name)
			}
			return names
		}
		typesIn, typesNotIn := typeSubset(), typeSubset()
		for i := range replicas {
			p := workload.Pod(fmt.Sprintf("%s-%d", app, i), cpu, mem, map[string]string{"app": app})
			sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
			term := func(k string) corev1.PodAffinityTerm {
				return corev1.PodAffinityTerm{TopologyKey: k, LabelSelector: sel}
			}
			switch kind {
			case 1:
				p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
					WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
			case 2:
				p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: int32(1 + r.IntN(2)), TopologyKey: corev1.LabelHostname,
					WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
			case 3:
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(corev1.LabelHostname)}}}
			case 4:
				p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(corev1.LabelTopologyZone)}}}
			case 5:
				p.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "test-zone-3"}
			case 6:
				p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule}}
				p.Spec.NodeSelector = map[string]string{"dedicated": "batch"}
			case 7:
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{HostPort: 8080, ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
			case 8:
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(corev1.LabelTopologyZone)}}}
			case 9:
				// Each pod its own instance types (In): pods of one plan with different
				// instance-type selectors share a claim only on types every one of them allows.
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: instanceTypes(corev1.NodeSelectorOpIn, typeSubset())}
			case 10:
				// The deployment's instance types, or not them (In / NotIn), alternating.
				op, names := corev1.NodeSelectorOpIn, typesIn
				if i%2 == 1 {
					op, names = corev1.NodeSelectorOpNotIn, typesNotIn
				}
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: instanceTypes(op, names)}
			case 11:
				// Required pod affinity to each other by zone, with instance-type selectors that
				// no one machine meets for all: several machines in one zone.
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: instanceTypes(corev1.NodeSelectorOpIn, []string{its[i%3].Name}),
					PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(corev1.LabelTopologyZone)}}}
			}
			in.Pods = append(in.Pods, p)
		}
	}
	return in
}

// instanceTypes is a required node affinity on the instance-type label.
func instanceTypes(op corev1.NodeSelectorOperator, names []string) *corev1.NodeAffinity {
	return &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelInstanceTypeStable, Operator: op, Values: names}}}}}}
}

func TestRandomPlansRespectEveryHardConstraint(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		in := randomInput(r)
		res := solver.Solve(in, solver.Options{})
		for _, err := range verify.Plan(in, res) {
			t.Errorf("seed %d: %v", seed, err)
		}
		if len(res.NodeClaims)+len(res.Bindings) == 0 {
			t.Errorf("seed %d: nothing placed of %d pods; first reason: %s", seed, len(in.Pods), res.Unschedulable[0].Reason)
		}
		if t.Failed() {
			return
		}
	}
}

func TestKarpenterDiversePlanIsSound(t *testing.T) {
	its := workload.FakeInstanceTypes(400)
	in := solver.Input{Pods: workload.DiversePods(2000, 42), NodePools: []solver.NodePool{workload.UnlimitedPool("default", its)}}
	res := solver.Solve(in, solver.Options{})
	if len(res.Unschedulable) > 0 {
		t.Fatalf("%d pods unschedulable; first: %s", len(res.Unschedulable), res.Unschedulable[0].Reason)
	}
	for _, err := range verify.Plan(in, res) {
		t.Error(err)
	}
}

func TestSolveIsDeterministic(t *testing.T) {
	its := workload.FakeInstanceTypes(100)
	in := solver.Input{Pods: workload.DiversePods(1000, 7), NodePools: []solver.NodePool{workload.UnlimitedPool("default", its)}}
	fingerprint := func(r *solver.Result) string {
		s := ""
		for _, nc := range r.NodeClaims {
			s += nc.Requirements.String() + fmt.Sprint(len(nc.Pods), nc.Price)
			for _, p := range nc.Pods {
				s += p.Name + ","
			}
			s += "\n"
		}
		return s
	}
	first := fingerprint(solver.Solve(in, solver.Options{}))
	for range 3 {
		if got := fingerprint(solver.Solve(in, solver.Options{})); got != first {
			t.Fatal("two solves of the same input differ")
		}
	}
}
