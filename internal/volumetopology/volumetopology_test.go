package volumetopology

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const zone = "topology.kubernetes.io/zone"

func zoneTerm(zones ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: zones}}}
}

func objects() Objects {
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	sc := func(name string, mode *storagev1.VolumeBindingMode, zones ...string) *storagev1.StorageClass {
		c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "ebs.csi.aws.com", VolumeBindingMode: mode}
		if len(zones) > 0 {
			c.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: zone, Values: zones}}}}
		}
		return c
	}
	pvc := func(name, sc, volume string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &sc, VolumeName: volume}}
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-1"}},
		NodeAffinity:           &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{zoneTerm("us-east-1a")}}}}}
	nfs := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}}}}
	o := Objects{
		PVCs:           map[types.NamespacedName]*corev1.PersistentVolumeClaim{},
		PVs:            map[string]*corev1.PersistentVolume{"pv-a": pv, "pv-nfs": nfs},
		StorageClasses: map[string]*storagev1.StorageClass{"gp3": sc("gp3", &wffc, "us-east-1b", "us-east-1c"), "any": sc("any", &wffc), "instant": sc("instant", &immediate)},
	}
	for _, c := range []*corev1.PersistentVolumeClaim{pvc("bound", "gp3", "pv-a"), pvc("wffc", "gp3", ""), pvc("wffc-any", "any", ""),
		pvc("immediate", "instant", ""), pvc("dangling", "gp3", "pv-gone"), pvc("shared", "", "pv-nfs"), pvc("web-0-scratch", "gp3", "")} {
		o.PVCs[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
	}
	return o
}

func podWith(claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "web-0"}}
	for _, c := range claims {
		if c == "ephemeral:scratch" {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
			continue
		}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}})
	return p
}

func TestVolumeNeeds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		terms       [][]corev1.NodeSelectorTerm
		attachments map[string]int64
		notReady    bool
	}{
		{"no claims", podWith(), nil, nil, false},
		{"bound to a zonal volume", podWith("bound"), [][]corev1.NodeSelectorTerm{{zoneTerm("us-east-1a")}}, map[string]int64{"ebs.csi.aws.com": 1}, false},
		{"wait for first consumer with allowed topologies", podWith("wffc"), [][]corev1.NodeSelectorTerm{{zoneTerm("us-east-1b", "us-east-1c")}}, map[string]int64{"ebs.csi.aws.com": 1}, false},
		{"wait for first consumer anywhere", podWith("wffc-any"), nil, map[string]int64{"ebs.csi.aws.com": 1}, false},
		{"generic ephemeral volume", podWith("ephemeral:scratch"), [][]corev1.NodeSelectorTerm{{zoneTerm("us-east-1b", "us-east-1c")}}, map[string]int64{"ebs.csi.aws.com": 1}, false},
		{"two volumes", podWith("bound", "wffc"), [][]corev1.NodeSelectorTerm{{zoneTerm("us-east-1a")}, {zoneTerm("us-east-1b", "us-east-1c")}}, map[string]int64{"ebs.csi.aws.com": 2}, false},
		{"non-CSI volume without affinity", podWith("shared"), nil, nil, false},
		{"immediate binding not yet bound", podWith("immediate"), nil, nil, true},
		{"missing claim", podWith("nope"), nil, nil, true},
		{"bound to a missing volume", podWith("dangling"), nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := objects().For(tc.pod)
			if IsNotReady(err) != tc.notReady || (err != nil && !tc.notReady) {
				t.Fatalf("err = %v, want not ready %v", err, tc.notReady)
			}
			if tc.notReady {
				return
			}
			if !reflect.DeepEqual(n.Terms, tc.terms) {
				t.Errorf("terms %v, want %v", n.Terms, tc.terms)
			}
			if !reflect.DeepEqual(n.Attachments, tc.attachments) {
				t.Errorf("attachments %v, want %v", n.Attachments, tc.attachments)
			}
		})
	}
}

func TestInjectANDsEveryVolumeWithEachPodTerm(t *testing.T) {
	arch := func(a string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{a}}
	}
	pod := podWith("bound")
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{arch("amd64")}}, {MatchExpressions: []corev1.NodeSelectorRequirement{arch("arm64")}}}}}}
	got := Inject(pod, Needs{Terms: [][]corev1.NodeSelectorTerm{{zoneTerm("a"), zoneTerm("b")}}})
	terms := got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 4 {
		t.Fatalf("%d terms, want 2 pod terms × 2 volume terms", len(terms))
	}
	for _, term := range terms {
		if len(term.MatchExpressions) != 2 {
			t.Fatalf("term %v does not AND arch with zone", term)
		}
	}
	if pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "kubernetes.io/arch" ||
		len(pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != 2 {
		t.Fatal("the original pod was modified")
	}
	// A pod without affinity gets the volume's terms; one whose only term is empty still matches
	// nothing.
	plain := Inject(podWith("bound"), Needs{Terms: [][]corev1.NodeSelectorTerm{{zoneTerm("a")}}})
	if n := len(plain.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms); n != 1 {
		t.Fatalf("%d terms, want 1", n)
	}
	empty := podWith("bound")
	empty.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}}}
	if got := Inject(empty, Needs{Terms: [][]corev1.NodeSelectorTerm{{zoneTerm("a")}}}); got != empty {
		t.Fatal("an empty term was made to match by a volume's term")
	}
}
