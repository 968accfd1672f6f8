package autoscaling

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

func TestScaleUpThenDownLeavesNothing(t *testing.T) {
	pool(t, "e2e-scale", nil, nil)
	d := deployment(t, "scale", "e2e-scale", 0, "1", "1536Mi", nil)
	scale(t, d, 50)
	eventually(t, "50 pods Running", 3*time.Minute, running(t, "scale", 50))

	ncs := claims(t, "e2e-scale")
	if len(ncs) == 0 {
		t.Fatal("pods run but no NodeClaim exists")
	}
	order := []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeReady}
	nodes := map[string]bool{}
	for _, nc := range ncs {
		var last time.Time
		for _, typ := range order {
			c := meta.FindStatusCondition(nc.Status.Conditions, typ)
			if c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("NodeClaim %s: %s not True: %+v", nc.Name, typ, nc.Status.Conditions)
			}
			if c.LastTransitionTime.Time.Before(last) {
				t.Fatalf("NodeClaim %s: %s before the previous condition", nc.Name, typ)
			}
			last = c.LastTransitionTime.Time
		}
		nodes[nc.Status.NodeName] = true
		if nc.Labels[karpv1.InstanceTypeLabelKey] == "" || nc.Labels[poolLabel] != "e2e-scale" {
			t.Fatalf("NodeClaim %s labels %v", nc.Name, nc.Labels)
		}
		// The Node is the machine launched: never kwok's placeholder capacity.
		node := &corev1.Node{}
		if err := s.Client.Get(t.Context(), client.ObjectKey{Name: nc.Status.NodeName}, node); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(node.Status.Allocatable, nc.Status.Allocatable) {
			t.Fatalf("Node %s allocatable %v, its NodeClaim's %v", node.Name, node.Status.Allocatable, nc.Status.Allocatable)
		}
	}
	// Every machine is the one the plan put first: the cheapest offering among its claim's
	// candidate types, zones and capacity types.
	snc := &simv1alpha1.SimNodeClass{}
	if err := s.Client.Get(t.Context(), client.ObjectKey{Name: "e2e-scale"}, snc); err != nil {
		t.Fatal(err)
	}
	its, err := simInstanceTypes(snc)
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range ncs {
		cheapest, launched := cheapestAllowed(nc, its)
		if launched > cheapest+1e-9 {
			t.Errorf("NodeClaim %s launched %s at $%.4f/h; its cheapest allowed offering costs $%.4f/h",
				nc.Name, nc.Labels[karpv1.InstanceTypeLabelKey], launched, cheapest)
		}
	}
	for _, p := range pods(t, "scale") {
		if !nodes[p.Spec.NodeName] {
			t.Fatalf("pod %s runs on %s, not on a node of the pool", p.Name, p.Spec.NodeName)
		}
	}

	resp, err := http.Get("http://" + s.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`karpenter_nodeclaims_created_total{min_values_relaxed="false",nodepool="e2e-scale",reason="provisioned"}`,
		`karpenter_nodeclaims_initialized_total{nodepool="e2e-scale"}`, `capstan_nodepool_cost_dollars_per_hour{nodepool="e2e-scale"}`,
		`karpenter_nodes_created_total{nodepool="e2e-scale",zone=`, `karpenter_build_info{commit=`,
		`karpenter_scheduler_scheduling_duration_seconds_count{controller="provisioner"}`, `karpenter_nodepools_usage{nodepool="e2e-scale",resource_type="ephemeral_storage"}`,
		`operator_status_condition_count{kind="NodeClaim",`, `operator_status_condition_count{kind="NodePool",name="e2e-scale",reason="Ready",status="True",type="Ready"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	scale(t, d, 0)
	eventually(t, "pods gone", time.Minute, func(context.Context) (bool, error) { return len(pods(t, "scale")) == 0, nil })
	for _, nc := range ncs {
		if err := s.Client.Delete(t.Context(), &nc); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "NodeClaims and Nodes gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		if len(claims(t, "e2e-scale")) > 0 {
			return false, nil
		}
		nl := &corev1.NodeList{}
		if err := s.Client.List(ctx, nl, client.MatchingLabels{poolLabel: "e2e-scale"}); err != nil {
			return false, err
		}
		return len(nl.Items) == 0, nil
	})
	instances, creates := cloudState(t)
	for _, nc := range ncs {
		if creates[nc.Name] != 1 {
			t.Errorf("NodeClaim %s launched %d machines", nc.Name, creates[nc.Name])
		}
	}
	for id, inst := range instances {
		if inst.NodeClass == "e2e-scale" {
			t.Errorf("machine %s of the pool is still running in the simulated cloud", id)
		}
	}
}

func TestTaintedPoolTakesOnlyItsWorkers(t *testing.T) {
	pool(t, "e2e-orders", nil, func(np *karpv1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels["workload"] = "orders"
		np.Spec.Template.Spec.Taints = karpv1.Taints{{Key: "workload", Value: "orders", Effect: corev1.TaintEffectNoSchedule}}
		w := int32(60)
		np.Spec.Weight = &w
	})
	// A general pool whose machines carry the same pool label, so both kinds of pods could go there.
	pool(t, "e2e-general", nil, func(np *karpv1.NodePool) { np.Spec.Template.ObjectMeta.Labels[poolLabel] = "e2e-orders" })
	deployment(t, "orders", "e2e-orders", 4, "1", "1Gi", func(ps *corev1.PodSpec) {
		ps.NodeSelector["workload"] = "orders"
		ps.Tolerations = []corev1.Toleration{{Key: "workload", Operator: corev1.TolerationOpEqual, Value: "orders", Effect: corev1.TaintEffectNoSchedule}}
	})
	deployment(t, "plain", "e2e-orders", 4, "1", "1Gi", nil)
	eventually(t, "orders pods Running", 2*time.Minute, running(t, "orders", 4))
	eventually(t, "plain pods Running", 2*time.Minute, running(t, "plain", 4))
	nodePool := func(name string) string {
		n := &corev1.Node{}
		if err := s.Client.Get(t.Context(), client.ObjectKey{Name: name}, n); err != nil {
			t.Fatal(err)
		}
		return n.Labels[karpv1.NodePoolLabelKey]
	}
	for _, p := range pods(t, "orders") {
		if np := nodePool(p.Spec.NodeName); np != "e2e-orders" {
			t.Errorf("orders pod %s on NodePool %s", p.Name, np)
		}
	}
	for _, p := range pods(t, "plain") {
		if np := nodePool(p.Spec.NodeName); np == "e2e-orders" {
			t.Errorf("plain pod %s landed on the orders pool", p.Name)
		}
	}
	// Its nodes registered: the pool says its launches are healthy.
	eventually(t, "e2e-orders NodeRegistrationHealthy", time.Minute, func(ctx context.Context) (bool, error) {
		np := &karpv1.NodePool{}
		if err := s.Client.Get(ctx, client.ObjectKey{Name: "e2e-orders"}, np); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(np.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy), nil
	})
}

// limits.cpu 100 holds at every moment of a 1,000-pod burst that needs 250 CPU, whichever
// candidate each claim may still launch as.
func TestLimitsHoldAtEveryMoment(t *testing.T) {
	pool(t, "e2e-limits", nil, func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}
	})
	deployment(t, "limited", "e2e-limits", 1000, "250m", "256Mi", nil)
	limit := resource.MustParse("100")
	check := func(ctx context.Context) int {
		var total resource.Quantity
		for _, nc := range claims(t, "e2e-limits") {
			// Before launch a claim may become any of its types: count the largest CPU among them
			// by its requirement; after launch, its capacity.
			if c, ok := nc.Status.Capacity[corev1.ResourceCPU]; ok {
				total.Add(c)
				continue
			}
			total.Add(largestCPU(nc))
		}
		if total.Cmp(limit) > 0 {
			t.Fatalf("NodeClaims of the pool add up to %s CPU, limit 100", total.String())
		}
		return len(claims(t, "e2e-limits"))
	}
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		check(t.Context())
		time.Sleep(200 * time.Millisecond)
	}
	if check(t.Context()) == 0 {
		t.Fatal("no NodeClaim within the limits")
	}
	ev := &corev1.EventList{}
	if err := s.Client.List(t.Context(), ev, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ev.Items, func(e corev1.Event) bool {
		return strings.HasPrefix(e.InvolvedObject.Name, "limited-") && strings.Contains(e.Message, "limits exhausted")
	}) {
		t.Fatal("no pod was told the NodePool's limits are exhausted")
	}
}

// largestCPU is the CPU of the largest instance type a claim's requirements allow, from the
// catalog names (the sim catalog's CPU label).
func largestCPU(nc karpv1.NodeClaim) resource.Quantity {
	var best resource.Quantity
	for _, r := range nc.Spec.Requirements {
		if r.Key != karpv1.InstanceTypeLabelKey || r.Operator != karpv1.NodeSelectorOpIn {
			continue
		}
		for _, v := range r.Values {
			if q := catalogCPU(v); q.Cmp(best) > 0 {
				best = q
			}
		}
	}
	return best
}

func TestInsufficientCapacityFallsBackToAnotherType(t *testing.T) {
	pool(t, "e2e-ice", func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.Zones = []string{"zone-a"}
		snc.Spec.InstanceTypes = []string{"c5.large", "m5.large", "m5.xlarge"}
		snc.Spec.Failures.InsufficientCapacity = []simv1alpha1.OfferingSelector{{InstanceType: "c5.large"}}
	}, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	deployment(t, "ice", "e2e-ice", 1, "1", "1Gi", nil)
	eventually(t, "the pod Running", 2*time.Minute, running(t, "ice", 1))
	for _, nc := range claims(t, "e2e-ice") {
		if it := nc.Labels[karpv1.InstanceTypeLabelKey]; it == "c5.large" {
			t.Fatalf("launched c5.large despite insufficient capacity")
		}
	}
}

func TestRestartMidLaunchBuysNoSecondMachine(t *testing.T) {
	pool(t, "e2e-restart", func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.LaunchDelay = &metav1.Duration{Duration: 3 * time.Second}
	}, nil)
	deployment(t, "restart", "e2e-restart", 5, "1", "1Gi", nil)
	eventually(t, "a NodeClaim", time.Minute, func(context.Context) (bool, error) { return len(claims(t, "e2e-restart")) > 0, nil })
	stopCapstan(syscall.SIGKILL)
	if err := startCapstan(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pods Running after the restart", 2*time.Minute, running(t, "restart", 5))
	_, creates := cloudState(t)
	for _, nc := range claims(t, "e2e-restart") {
		if creates[nc.Name] != 1 {
			t.Fatalf("NodeClaim %s launched %d machines", nc.Name, creates[nc.Name])
		}
	}
}

func TestDeletingANodePoolRemovesItsMachines(t *testing.T) {
	np := pool(t, "e2e-delete", nil, nil)
	deployment(t, "doomed", "e2e-delete", 3, "1", "1Gi", nil)
	eventually(t, "pods Running", 2*time.Minute, running(t, "doomed", 3))
	if len(claims(t, "e2e-delete")) == 0 {
		t.Fatal("no NodeClaims")
	}
	if err := s.Client.Delete(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool's NodeClaims and Nodes gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		nl := &corev1.NodeList{}
		if err := s.Client.List(ctx, nl, client.MatchingLabels{karpv1.NodePoolLabelKey: "e2e-delete"}); err != nil {
			return false, err
		}
		return len(claims(t, "e2e-delete")) == 0 && len(nl.Items) == 0, nil
	})
}
