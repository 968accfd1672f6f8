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
