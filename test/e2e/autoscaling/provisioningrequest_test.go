package autoscaling

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/provreq"
)

// gang is a Kueue-shaped ProvisioningRequest: a PodTemplate of pods of 900m CPU, 32 of them, on a
// pool of m5.xlarge machines (4 vCPU: four such pods each) in one zone, so that the gang fits
// only on 8 machines; machines is how many m5.xlarge the simulated account has there.
func gang(t *testing.T, name string, class string, machines int32) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.Zones = []string{"zone-a"}
		snc.Spec.InstanceTypes = []string{"m5.xlarge"}
		snc.Spec.Failures.Shortages = []simv1alpha1.OfferingShortage{{OfferingSelector: simv1alpha1.OfferingSelector{InstanceType: "m5.xlarge"}, Machines: machines}}
		// Provisioned once launched, the machines register later: pods that come at once are
		// pending meanwhile, as a provisioning pass sees them.
		snc.Spec.RegistrationDelay = &metav1.Duration{Duration: 20 * time.Second}
	}, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	})
	tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       gangPodSpec(name),
	}}
	pr := &autoscalingv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: autoscalingv1.ProvisioningRequestSpec{ProvisioningClassName: class,
			PodSets: []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: name}, Count: 32}}}}
	for _, o := range []client.Object{tmpl, pr} {
		if err := s.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Client.Delete(context.Background(), o) })
	}
	return pr
}

func gangPodSpec(poolName string) corev1.PodSpec {
	grace := int64(0)
	return corev1.PodSpec{TerminationGracePeriodSeconds: &grace, NodeSelector: map[string]string{poolLabel: poolName},
		Containers: []corev1.Container{{Name: "app", Image: "pause", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("900m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}
}

// answered waits for the request's Provisioned condition to have the status and reason.
func answered(t *testing.T, pr *autoscalingv1.ProvisioningRequest, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s Provisioned=%s %s", pr.Name, status, reason), 2*time.Minute, func(context.Context) (bool, error) {
		c := condition(t, pr, autoscalingv1.ConditionProvisioned)
		return c != nil && c.Status == status && c.Reason == reason, nil
	})
}

// condition returns the request's condition of type t (nil: none yet).
func condition(t *testing.T, pr *autoscalingv1.ProvisioningRequest, typ string) *metav1.Condition {
	t.Helper()
	cur := &autoscalingv1.ProvisioningRequest{}
	if err := s.Client.Get(t.Context(), client.ObjectKeyFromObject(pr), cur); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(cur.Status.Conditions, typ)
}

// A best-effort atomic request for a 32-pod gang that fits only on 8 machines gets all 8: it is
// Provisioned once they launched; the pods that consume it (Kueue's annotation) run on those 8
// and no other machine is bought for them; and the machines, empty until the pods come, are not
// consolidated while they are kept for them.
func TestProvisioningRequestGetsTheWholeGang(t *testing.T) {
	// Room for twice the machines: a second set bought for the pods would stay.
	pr := gang(t, "e2e-gang-all", autoscalingv1.ClassBestEffortAtomicScaleUp, 16)
	answered(t, pr, metav1.ConditionTrue, provreq.ReasonProvisioned)
	if c := condition(t, pr, autoscalingv1.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Accepted %v", c)
	}
	if n := len(claims(t, "e2e-gang-all")); n != 8 {
		t.Fatalf("%d NodeClaims for the gang, want 8", n)
	}
	if want := `capstan_provisioning_requests{class="best-effort-atomic-scale-up.autoscaling.x-k8s.io",state="provisioned"}`; !strings.Contains(scrape(t), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	// Kueue's pods: created once the request is Provisioned, each naming it; pending until the
	// machines register, they get no machine of their own.
	for i := range 32 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e2e-gang-all-%d", i), Namespace: "default",
			Labels:      map[string]string{"app": "e2e-gang-all"},
			Annotations: map[string]string{autoscalingv1.ConsumeAnnotationKey: pr.Name, autoscalingv1.ClassAnnotationKey: pr.Spec.ProvisioningClassName}},
			Spec: gangPodSpec("e2e-gang-all")}
		if err := s.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	}
	eventually(t, "32 pods Running", 3*time.Minute, running(t, "e2e-gang-all", 32))
	if n := len(claims(t, "e2e-gang-all")); n != 8 {
		t.Fatalf("%d NodeClaims once the gang runs, want the 8 bought for it", n)
	}
	// Every pod bound, the booking has served: the machines are released before its 10 minutes.
	eventually(t, "the machines released once the gang's pods bound", time.Minute, func(context.Context) (bool, error) {
		for _, nc := range claims(t, "e2e-gang-all") {
			if nc.Annotations[provreq.BookedUntilAnnotationKey] != "" {
				return false, nil
			}
		}
		return true, nil
	})
}

// Bought for a request, machines are kept for its pods until they come: empty, they are not
// consolidated while the request is booked, and consolidation says why.
func TestProvisioningRequestMachinesWaitForTheirPods(t *testing.T) {
	pr := gang(t, "e2e-gang-wait", autoscalingv1.ClassBestEffortAtomicScaleUp, 8)
	answered(t, pr, metav1.ConditionTrue, provreq.ReasonProvisioned)
	ncs := claims(t, "e2e-gang-wait")
	eventFor(t, "NodeClaim", ncs[0].Name, "Unconsolidatable", "ProvisioningRequest default/e2e-gang-wait")
	for _, nc := range claims(t, "e2e-gang-wait") {
		if !nc.DeletionTimestamp.IsZero() {
			t.Fatalf("NodeClaim %s of a booked request is being deleted", nc.Name)
		}
	}
	if n := len(claims(t, "e2e-gang-wait")); n != 8 {
		t.Fatalf("%d NodeClaims of the booked request, want 8", n)
	}
}

// A best-effort atomic request for the same gang where the zone has only 7 such machines gets
// none: the attempt's 8th launch fails, the 7 launched are given back, and the request says why;
// tried again, it finds no capacity and buys nothing.
func TestProvisioningRequestGetsNoPartOfTheGang(t *testing.T) {
	pr := gang(t, "e2e-gang-none", autoscalingv1.ClassBestEffortAtomicScaleUp, 7)
	answered(t, pr, metav1.ConditionFalse, provreq.ReasonLaunchFailed)
	eventually(t, "no machine left for the gang", 2*time.Minute, func(context.Context) (bool, error) {
		instances, _ := cloudState(t)
		for _, inst := range instances {
			if inst.NodeClass == "e2e-gang-none" {
				return false, nil
			}
		}
		return len(claims(t, "e2e-gang-none")) == 0, nil
	})
	// Tried again within RetryScaleUp: the offering is out, so it is not provisioned, and buys
	// nothing that stays.
	answered(t, pr, metav1.ConditionFalse, provreq.ReasonCapacityNotFound)
	if n := len(claims(t, "e2e-gang-none")); n != 0 {
		t.Fatalf("%d NodeClaims kept for a gang that cannot have all its machines", n)
	}
}

// A check-capacity request is Provisioned when its pods fit on the cluster's machines now, and
// not when they do not (the room another request was told of is kept for it); it buys nothing.
func TestProvisioningRequestChecksCapacity(t *testing.T) {
	pool(t, "e2e-check", func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.Zones = []string{"zone-a"}
		snc.Spec.InstanceTypes = []string{"m5.xlarge"}
	}, nil)
	// One machine of four such pods' room, two of it taken.
	deployment(t, "e2e-check", "e2e-check", 2, "900m", "1Gi", nil)
	eventually(t, "2 pods Running", 2*time.Minute, running(t, "e2e-check", 2))
	check := func(name string, count int32) *autoscalingv1.ProvisioningRequest {
		tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Template: corev1.PodTemplateSpec{Spec: gangPodSpec("e2e-check")}}
		pr := &autoscalingv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: autoscalingv1.ProvisioningRequestSpec{ProvisioningClassName: autoscalingv1.ClassCheckCapacity,
				PodSets: []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: name}, Count: count}}}}
		for _, o := range []client.Object{tmpl, pr} {
			if err := s.Client.Create(t.Context(), o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Client.Delete(context.Background(), o) })
		}
		return pr
	}
	answered(t, check("e2e-check-yes", 2), metav1.ConditionTrue, provreq.ReasonCapacityIsFound)
	answered(t, check("e2e-check-no", 1), metav1.ConditionFalse, provreq.ReasonCapacityNotFound)
	if n := len(claims(t, "e2e-check")); n != 1 {
		t.Fatalf("%d NodeClaims after the checks, want the Deployment's 1 (a check buys nothing)", n)
	}
}
