package provisioning

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodepools"
)

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
}

func withClaim(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}
	}
}

// A pod whose claim is bound to a zonal volume gets a machine in that zone; one whose class
// waits for its first consumer gets a machine in a zone the class allows; one whose claim waits
// for immediate binding gets nothing yet, and an event says why.
func TestVolumesDecideTheZone(t *testing.T) {
	np := pool("prov-volumes", nil)
	p, rec := setup(t, np)
	ns := namespace(t)
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	create(t, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "prov-zonal"}, Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &wffc,
		AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: karpv1.ZoneLabelKey, Values: []string{"zone-a"}}}}}})
	create(t, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "prov-immediate"}, Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &immediate})
	create(t, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "prov-pv-b"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-b"}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: karpv1.ZoneLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-b"}}}}}}}}})
	claim := func(name, class, volume string) {
		create(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class, VolumeName: volume, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}})
	}
	claim("bound-b", "", "prov-pv-b")
	claim("new-a", "prov-zonal", "")
	claim("later", "prov-immediate", "")
	pendingPods(t, ns, "db-b", 1, "1", withClaim("bound-b"))
	pendingPods(t, ns, "db-a", 1, "1", withClaim("new-a"))
	pendingPods(t, ns, "db-later", 1, "1", withClaim("later"))

	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	zoneOfPod := map[string]string{}
	for _, nc := range res.Created {
		reqs, err := nodepools.FromAPI(nc.Spec.Requirements)
		if err != nil {
			t.Fatal(err)
		}
		z, _ := reqs.Get(karpv1.ZoneLabelKey)
		for _, pod := range planFor(res, nc) {
			zoneOfPod[pod] = strings.Join(z.Values(), ",")
		}
	}
	if zoneOfPod["db-b-0"] != "zone-b" || zoneOfPod["db-a-0"] != "zone-a" {
		t.Fatalf("pods planned into zones %v, want db-b-0 in zone-b and db-a-0 in zone-a", zoneOfPod)
	}
	if _, planned := zoneOfPod["db-later-0"]; planned {
		t.Fatal("a pod waiting for immediate binding was planned")
	}
	found := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "Waiting for volumes") {
			found = true
		}
	}
	if !found {
		t.Fatal("no event for the pod waiting for its volume")
	}
}

// planFor names the pods the plan put on a created claim (claims are created in plan order).
func planFor(res *Result, nc *karpv1.NodeClaim) []string {
	for i, c := range res.Created {
		if c == nc {
			var names []string
			for _, p := range res.Plan.NodeClaims[i].Pods {
				names = append(names, p.Name)
			}
			return names
		}
	}
	return nil
}

// A node whose CSINode allows one more EBS attachment than its pods use takes one pending pod
// with a volume; the next goes to a new machine.
func TestCSINodeAttachLimitsAreHonoured(t *testing.T) {
	np := pool("prov-csi", nil)
	p, _ := setup(t, np)
	ns := namespace(t)
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	create(t, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "prov-csi"}, Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &wffc})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "prov-csi-node", Labels: map[string]string{
		corev1.LabelHostname: "prov-csi-node", karpv1.ZoneLabelKey: "zone-a", karpv1.ArchLabelKey: "amd64", karpv1.OSLabelKey: "linux"}}}
	create(t, node)
	// The API server taints a new Node not-ready; its kubelet would be up by now.
	node.Spec.Taints = nil
	if err := env.Client.Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Capacity = node.Status.Allocatable
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	if err := env.Client.Status().Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	create(t, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node.Name}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
		Name: "ebs.csi.aws.com", NodeID: "i-1", Allocatable: &storagev1.VolumeNodeResources{Count: &two}}}}})
	create(t, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "prov-csi-pv"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-1"}}}})
	claimFor := func(name, class, volume string) {
		create(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class, VolumeName: volume, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}})
	}
	claimFor("existing", "", "prov-csi-pv")
	claimFor("new-0", "prov-csi", "")
	claimFor("new-1", "prov-csi", "")
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "running"}, Spec: corev1.PodSpec{NodeName: node.Name,
		Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	withClaim("existing")(running)
	create(t, running)
	pendingPods(t, ns, "new", 2, "100m", func(pod *corev1.Pod) { withClaim(pod.Name)(pod) })

	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Bindings) != 1 || len(res.Created) != 1 {
		t.Fatalf("%d pod(s) planned on the node with one attachment left and %d new claim(s); want 1 and 1",
			len(res.Plan.Bindings), len(res.Created))
	}
}
