package aws

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
)

// TestInterruptionStorm: N spot machines, each running one pod, get Spot interruption warnings
// within a minute. Each is handled once — its NodeClaim deleted, one new machine bought for its
// pod (2N NodeClaims in all) — the NodePool's limit of 1.5 N nodes holds at every moment (from a
// watch of every NodeClaim), every message is deleted from the queue and none is
// dead-lettered, no instance is left without a NodeClaim, and every pod runs again.
func TestInterruptionStorm(t *testing.T) {
	n := setting("STORM", 8, 50)
	nodesLimit := n + n/2
	const name = "storm"
	nc := &awsv1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: awsv1.EC2NodeClassSpec{
		Role:                       "KarpenterNodeRole-" + cluster,
		AMISelectorTerms:           []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}},
		SubnetSelectorTerms:        []awsv1.SubnetSelectorTerm{{Tags: awsv1.SelectorTags{"karpenter.sh/discovery": cluster}}},
		SecurityGroupSelectorTerms: []awsv1.SecurityGroupSelectorTerm{{Tags: awsv1.SelectorTags{"karpenter.sh/discovery": cluster}}},
	}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.ObjectMeta.Labels = map[string]string{"pool": name}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: awsv1.Group, Kind: "EC2NodeClass", Name: name}
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeSpot}},
		{Key: awsv1.LabelInstanceCategory, Operator: karpv1.NodeSelectorOpIn, Values: []string{"c", "m"}},
		{Key: karpv1.ArchLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.ArchitectureAmd64}},
	}
	np.Spec.Limits = corev1.ResourceList{karpv1.ResourceNodes: *resource.NewQuantity(int64(nodesLimit), resource.DecimalSI)}
	np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
	for _, o := range []client.Object{nc, np} {
		if err := h.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimLog := h.WatchClaims(t, ctx, name)

	labels := map[string]string{"app": name}
	grace, replicas := int64(0), int32(n)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace, NodeSelector: map[string]string{"pool": name},
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}}},
				Containers: []corev1.Container{{Name: "w", Image: "pause", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}}},
			}}}}
	if err := h.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every pod Running on spot", 5*time.Minute, h.Running(t, name, n))
	var victims []string
	for _, c := range h.Claims(t, name) {
		insts := cloud.LiveInstances(aws.NodeClaimTag, c.Name)
		if len(insts) != 1 || insts[0].Lifecycle != "spot" {
			t.Fatalf("instances of %s: %+v", c.Name, insts)
		}
		victims = append(victims, insts[0].ID)
	}
	// The storm: every machine warned within a minute.
	began := time.Now()
	for i, id := range victims {
		time.Sleep(time.Until(began.Add(time.Duration(i) * time.Minute / time.Duration(len(victims)))))
		if err := cloud.InterruptSpot(id, queue); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every interrupted machine and NodeClaim gone and every pod Running on a new one", 10*time.Minute, func(ctx context.Context) (bool, error) {
		for _, inst := range cloud.LiveInstances("", "") {
			if slices.Contains(victims, inst.ID) {
				return false, nil
			}
		}
		if len(h.Claims(t, name)) != n {
			return false, nil
		}
		return h.Running(t, name, n)(ctx)
	})
	settled := time.Since(began)
	eventually(t, "the queue empty", 2*time.Minute, func(context.Context) (bool, error) { return len(cloud.Messages(queue)) == 0, nil })
	dlq := len(cloud.Messages(queue + "-dlq"))
	seen := claimLog.Seen()
	live := map[string]bool{}
	for _, c := range h.Claims(t, name) {
		live[c.Name] = true
	}
	orphans := 0
	for _, inst := range cloud.LiveInstances(karpv1.NodePoolLabelKey, name) {
		if !live[inst.Tags[aws.NodeClaimTag]] {
			orphans++
		}
	}
	if len(seen) != 2*n || claimLog.MaxLive() > nodesLimit || dlq != 0 || orphans != 0 || len(live) != n {
		t.Errorf("%d NodeClaims in all (want %d), at most %d at once (limit %d), %d left (want %d), %d dead-lettered, %d instances without a claim",
			len(seen), 2*n, claimLog.MaxLive(), nodesLimit, len(live), n, dlq, orphans)
	}
	figures("interruption-storm warnings=%d within=1m nodeclaims-in-all=%d (want %d) most-at-once=%d limit=%d queue-left=0 dead-lettered=%d orphans=%d pods-running=%d/%d all-replaced-after=%s",
		n, len(seen), 2*n, claimLog.MaxLive(), nodesLimit, dlq, orphans, n, n, settled.Round(time.Second))
}
