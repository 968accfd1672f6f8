package aws

import (
	"context"
	"encoding/base64"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/test/awsfake"
)

// karpenterUserData is AL2023 user data as Karpenter writes it: a MIME document whose NodeConfig
// registers the kubelet with the claim's labels (the unregistered taint is left out: Karpenter
// removed it at registration, long before the move).
func karpenterUserData(t testing.TB, labels map[string]string) string {
	t.Helper()
	var kv []string
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	var b strings.Builder
	w := multipart.NewWriter(&b)
	fmt.Fprintf(&b, "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=%q\n\n", w.Boundary())
	part, err := w.CreatePart(textproto.MIMEHeader{"Content-Type": {"application/node.eks.aws"}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(part, "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: %s\n    apiServerEndpoint: https://kube.example:6443\n  kubelet:\n    flags:\n    - --node-labels=%q\n",
		cluster, strings.Join(kv, ","))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString([]byte(b.String()))
}

// TestKarpenterNodeClaimsAreAdopted moves a pool from Karpenter v1.15 to Capstan as
// docs/install.md says (stop Karpenter, start Capstan on the same objects): the instances,
// NodeClaims and Nodes Karpenter left — its tags, its finalizer, its hash annotations (scheme
// v3), its owner references, status as its lifecycle writes it — are taken over. Capstan
// launches nothing for them, does not drift them (the hash is restamped to Capstan's scheme),
// leaves their pods alone, and later removes them as its own when they are empty.
func TestKarpenterNodeClaimsAreAdopted(t *testing.T) {
	const name = "migrated"
	nc, np := poolObjects(name, req(karpv1.CapacityTypeLabelKey, karpv1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand))
	np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("0s")
	for _, o := range []client.Object{nc, np} {
		if err := s.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if s.Cmd == nil {
			_ = startCapstan()
		}
		_ = s.Client.Delete(context.Background(), np)
		eventuallyGone(t, name)
		_ = s.Client.Delete(context.Background(), nc)
	})
	// Both controllers resolve the class the same way; the class is resolved before the move.
	eventually(t, "the EC2NodeClass Ready", time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(nc), nc); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(nc.Status.Conditions, awsv1.ConditionTypeReady), nil
	})
	if err := s.Client.Get(t.Context(), client.ObjectKeyFromObject(np), np); err != nil {
		t.Fatal(err)
	}

	// "Karpenter" ran until now: Capstan is stopped, and what Karpenter leaves is written.
	stopCapstan(syscall.SIGTERM)
	const typ = "m6i.large"
	type left struct {
		inst  awsfake.Instance
		claim *karpv1.NodeClaim
	}
	var leftovers []left
	for i, suffix := range []string{"k7x2p", "q9w4d"} {
		claimName := name + "-" + suffix
		sn := nc.Status.Subnets[i%len(nc.Status.Subnets)]
		labels := map[string]string{karpv1.NodePoolLabelKey: name, "pool": name, karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand,
			corev1.LabelInstanceTypeStable: typ, corev1.LabelTopologyZone: sn.Zone, awsv1.TagEC2NodeClass: name}
		inst := s.aws.RunInstance(awsfake.Instance{Type: typ, Zone: sn.Zone, ZoneID: sn.ZoneID, SubnetID: sn.ID, ImageID: nc.Status.AMIs[0].ID,
			Tags: map[string]string{"kubernetes.io/cluster/" + cluster: "owned", karpv1.NodePoolLabelKey: name, "eks:eks-cluster-name": cluster,
				awsv1.TagEC2NodeClass: name, aws.NodeClaimTag: claimName},
			Template: map[string]string{"UserData": karpenterUserData(t, labels)}})
		claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName, Labels: labels,
			Annotations: map[string]string{
				// Karpenter's hash of the template, which is Capstan's (the same scheme, v3).
				karpv1.NodePoolHashAnnotationKey:        nodepools.Hash(np),
				karpv1.NodePoolHashVersionAnnotationKey: "v3",
				awsv1.AnnotationEC2NodeClassHash:        fmt.Sprintf("%s-%d", nc.UID, nc.Generation),
				awsv1.AnnotationEC2NodeClassHashVersion: "v6",
				"karpenter.k8s.aws/tagged":              "true",
			},
			Finalizers: []string{karpv1.TerminationFinalizer},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: karpv1.SchemeGroupVersion.String(), Kind: "NodePool", Name: name, UID: np.UID,
				BlockOwnerDeletion: new(true)}}},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef,
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
					req(karpv1.NodePoolLabelKey, karpv1.NodeSelectorOpIn, name),
					req(karpv1.CapacityTypeLabelKey, karpv1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand),
					req(corev1.LabelInstanceTypeStable, karpv1.NodeSelectorOpIn, typ, "m6i.xlarge"),
				},
				Resources: karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourcePods: resource.MustParse("1")}},
			}}
		if err := s.Client.Create(t.Context(), claim); err != nil {
			t.Fatal(err)
		}
		leftovers = append(leftovers, left{inst, claim})
	}
	for _, l := range leftovers {
		node := &corev1.Node{}
		eventually(t, "the Node of "+l.inst.ID, time.Minute, func(ctx context.Context) (bool, error) {
			return s.Client.Get(ctx, client.ObjectKey{Name: l.inst.PrivateDNS}, node) == nil, nil
		})
		// Karpenter's registration: the claim's labels and annotations, its finalizer and the
		// claim as owner on the Node; then the claim's status.
		orig := node.DeepCopy()
		for k, v := range l.claim.Labels {
			node.Labels[k] = v
		}
		node.Labels[karpv1.NodeRegisteredLabelKey] = "true"
		node.Labels[karpv1.NodeInitializedLabelKey] = "true"
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		for k, v := range l.claim.Annotations {
			node.Annotations[k] = v
		}
		node.Finalizers = append(node.Finalizers, karpv1.TerminationFinalizer)
		node.OwnerReferences = append(node.OwnerReferences, metav1.OwnerReference{APIVersion: karpv1.SchemeGroupVersion.String(), Kind: "NodeClaim",
			Name: l.claim.Name, UID: l.claim.UID, BlockOwnerDeletion: new(true)})
		if err := s.Client.Patch(t.Context(), node, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		l.claim.Status = karpv1.NodeClaimStatus{ProviderID: l.inst.ProviderID(), NodeName: node.Name, ImageID: l.inst.ImageID,
			Capacity: node.Status.Capacity, Allocatable: node.Status.Allocatable, LastPodEventTime: now}
		for _, c := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeReady} {
			l.claim.Status.Conditions = append(l.claim.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c,
				LastTransitionTime: now, ObservedGeneration: l.claim.Generation})
		}
		if err := s.Client.Status().Update(t.Context(), l.claim); err != nil {
			t.Fatal(err)
		}
	}
	// One pod of one CPU per machine (two do not fit on an m6i.large).
	d := workers(t, "migrated-workers", 2, map[string]string{"pool": name}, nil)
	eventually(t, "the workers Running on Karpenter's nodes", time.Minute, running(t, "migrated-workers", 2))
	podsBefore := &corev1.PodList{}
	if err := s.Client.List(t.Context(), podsBefore, client.InNamespace("default"), client.MatchingLabels{"app": "migrated-workers"}); err != nil {
		t.Fatal(err)
	}

	// The move: Capstan starts on the same objects.
	if err := startCapstan(); err != nil {
		t.Fatal(err)
	}
	// Capstan has taken the claims over once it has judged them for consolidation
	// (Consolidatable, written by its disruption controller); their hash is already its own.
	eventually(t, "Karpenter's claims judged by Capstan", 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, l := range leftovers {
			c := &karpv1.NodeClaim{}
			if err := s.Client.Get(ctx, client.ObjectKeyFromObject(l.claim), c); err != nil {
				return false, err
			}
			if c.Annotations[karpv1.NodePoolHashVersionAnnotationKey] != nodepools.HashVersion ||
				!meta.IsStatusConditionTrue(c.Status.Conditions, karpv1.ConditionTypeConsolidatable) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, l := range leftovers {
		c := &karpv1.NodeClaim{}
		if err := s.Client.Get(t.Context(), client.ObjectKeyFromObject(l.claim), c); err != nil {
			t.Fatal(err)
		}
		if c.Annotations[karpv1.NodePoolHashAnnotationKey] != nodepools.Hash(np) {
			t.Errorf("claim %s hash %q, want the pool's %q", c.Name, c.Annotations[karpv1.NodePoolHashAnnotationKey], nodepools.Hash(np))
		}
		if cond := meta.FindStatusCondition(c.Status.Conditions, karpv1.ConditionTypeDrifted); cond != nil && cond.Status == metav1.ConditionTrue {
			t.Errorf("claim %s drifted after the move: %s %s", c.Name, cond.Reason, cond.Message)
		}
		if !c.DeletionTimestamp.IsZero() || c.Status.ProviderID != l.inst.ProviderID() {
			t.Errorf("claim %s deleting %v, provider ID %s (was %s)", c.Name, !c.DeletionTimestamp.IsZero(), c.Status.ProviderID, l.inst.ProviderID())
		}
	}
	if n := len(poolInstances(name)); n != 2 {
		t.Errorf("%d instances in pool %s after the move, want Karpenter's 2", n, name)
	}
	if live := s.aws.LiveInstances(karpv1.NodePoolLabelKey, name); len(live) != 2 {
		t.Errorf("%d live instances in pool %s after the move, want Karpenter's 2", len(live), name)
	}
	podsAfter := &corev1.PodList{}
	if err := s.Client.List(t.Context(), podsAfter, client.InNamespace("default"), client.MatchingLabels{"app": "migrated-workers"}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, p := range podsBefore.Items {
		uids[string(p.UID)] = p.Spec.NodeName
	}
	for _, p := range podsAfter.Items {
		if node, ok := uids[string(p.UID)]; !ok || node != p.Spec.NodeName || !p.DeletionTimestamp.IsZero() {
			t.Errorf("pod %s (on %s) was moved or replaced by the move", p.Name, p.Spec.NodeName)
		}
	}

	// Empty, Karpenter's machines are Capstan's to remove: claims, Nodes and instances go.
	scaleTo(t, d, 0)
	eventually(t, "Karpenter's claims removed by Capstan once empty", 2*time.Minute, func(context.Context) (bool, error) {
		return len(claims(t, name)) == 0, nil
	})
	for _, l := range leftovers {
		for _, i := range s.aws.Instances() {
			if i.ID == l.inst.ID && i.State != "shutting-down" && i.State != "terminated" {
				t.Errorf("instance %s of claim %s is %s after its claim went", i.ID, l.claim.Name, i.State)
			}
		}
		if err := s.Client.Get(t.Context(), client.ObjectKey{Name: l.inst.PrivateDNS}, &corev1.Node{}); err == nil {
			t.Errorf("node %s of claim %s is still there", l.inst.PrivateDNS, l.claim.Name)
		}
	}
	if n := len(poolInstances(name)); n != 2 {
		t.Errorf("%d instances were ever in pool %s, want Karpenter's 2: removing empty machines bought new ones", n, name)
	}
}

// poolInstances are the instances, live or not, tagged for a pool.
func poolInstances(pool string) []awsfake.Instance {
	var out []awsfake.Instance
	for _, i := range s.aws.Instances() {
		if i.Tags[karpv1.NodePoolLabelKey] == pool {
			out = append(out, i)
		}
	}
	return out
}
