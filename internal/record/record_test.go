package record_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/record"
	"capstan.dev/capstan/internal/scheme"
)

var at = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// source is a small cluster, served by a hand-made recording: a pool with one type, a claim,
// its node, a ReplicaSet and its pod carrying what a recording must not keep.
func source(t testing.TB) *record.Recording {
	t.Helper()
	ref := &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"}
	np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	np.Spec.Template.Spec.NodeClassRef = ref
	nc := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "default-abc", Labels: map[string]string{karpv1.NodePoolLabelKey: "default"}}}
	nc.Status.NodeName, nc.Status.ProviderID = "node-secret-1", "sim:///node-secret-1"
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-secret-1", Labels: map[string]string{corev1.LabelHostname: "node-secret-1"}},
		Spec: corev1.NodeSpec{ProviderID: "sim:///node-secret-1"}}
	rs := appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "payments-7d4", Namespace: "billing", UID: "rs-uid"}}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "payments-7d4-x2x9z", Namespace: "billing", Labels: map[string]string{"app": "payments"},
		Annotations:     map[string]string{karpv1.DoNotDisruptAnnotationKey: "true", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "payments-7d4", UID: types.UID("rs-uid"), Controller: new(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-secret-1", Containers: []corev1.Container{{Name: "app", Image: "registry.example/payments:1.2",
			Command: []string{"serve"}, Env: []corev1.EnvVar{{Name: "DB_PASSWORD", Value: "hunter2"}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "payments-data"}}},
				{Name: "cfg", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "payments-secret"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"}}
	return &record.Recording{APIVersion: record.APIVersion, Kind: record.Kind, CloudProvider: "sim",
		NodeClasses: []metav1.GroupKind{{Group: "capstan.dev", Kind: "SimNodeClass"}},
		InstanceTypes: []record.NodeClassInstanceType{{NodeClass: "capstan.dev/SimNodeClass/default", InstanceTypes: []record.InstanceType{{
			Name:         "m5.large",
			Requirements: []corev1.NodeSelectorRequirement{{Key: karpv1.InstanceTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"m5.large"}}},
			Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			Offerings:    []record.Offering{{Zone: "zone-a", CapacityType: "on-demand", Price: 0.096, Available: true}},
			VolumeLimits: map[string]int64{"ebs.csi.aws.com": 26},
		}}}},
		NodePools: []karpv1.NodePool{np}, NodeClaims: []karpv1.NodeClaim{nc}, Nodes: []corev1.Node{node}, Pods: []corev1.Pod{pod},
		ReplicaSets: []appsv1.ReplicaSet{rs}}
}

// recordFrom records the cluster a recording serves.
func recordFrom(t testing.TB, src *record.Recording, anonymize bool) (*record.Recording, string) {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := src.Cloud()
	if err != nil {
		t.Fatal(err)
	}
	r, err := record.Record(context.Background(), src.Reader(s), cloud, record.Options{Now: at, Anonymize: anonymize})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	return r, out.String()
}

// A recording keeps what decisions read — requests, labels, owners, the do-not-disrupt
// annotation, claims' volumes, the offerings — and drops images, commands, environment, other
// volumes, other annotations and the pod's IP.
func TestRecordKeepsWhatDecisionsRead(t *testing.T) {
	r, out := recordFrom(t, source(t), false)
	for _, secret := range []string{"hunter2", "DB_PASSWORD", "registry.example", "serve", "payments-secret", "last-applied", "10.0.0.7"} {
		if strings.Contains(out, secret) {
			t.Errorf("the recording holds %q", secret)
		}
	}
	if len(r.Pods) != 1 {
		t.Fatalf("%d pods recorded, want 1", len(r.Pods))
	}
	p := r.Pods[0]
	if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "500m" {
		t.Errorf("the pod's CPU request is %s, want 500m", got)
	}
	if p.Annotations[karpv1.DoNotDisruptAnnotationKey] != "true" || p.Labels["app"] != "payments" || metav1.GetControllerOf(&p) == nil {
		t.Errorf("the pod lost what decisions read: annotations %v, labels %v, owners %v", p.Annotations, p.Labels, p.OwnerReferences)
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].PersistentVolumeClaim == nil {
		t.Errorf("volumes %v, want the claim only", p.Spec.Volumes)
	}
	if len(r.InstanceTypes) != 1 || len(r.InstanceTypes[0].InstanceTypes) != 1 || r.InstanceTypes[0].InstanceTypes[0].Offerings[0].Price != 0.096 {
		t.Errorf("offerings %+v, want the node class's m5.large at 0.096", r.InstanceTypes)
	} else if got := r.InstanceTypes[0].InstanceTypes[0].VolumeLimits["ebs.csi.aws.com"]; got != 26 {
		t.Errorf("EBS volume limit %d, want the type's 26", got)
	}
	if !r.RecordedAt.Time.Equal(at) {
		t.Errorf("recorded at %s, want %s", r.RecordedAt.Time, at)
	}
}

// Anonymized, no name of the cluster is left, and the hashes still join: the pod's node is the
// node, the claim's node is the node and its hostname label, the pod's owner is the ReplicaSet.
func TestAnonymizedNamesStillJoin(t *testing.T) {
	r, out := recordFrom(t, source(t), true)
	for _, name := range []string{"node-secret-1", "payments-7d4", "x2x9z", "billing", "default-abc", "payments-data"} {
		if strings.Contains(out, name) {
			t.Errorf("the anonymized recording holds %q", name)
		}
	}
	node, pod, nc, rs := r.Nodes[0], r.Pods[0], r.NodeClaims[0], r.ReplicaSets[0]
	if pod.Spec.NodeName != node.Name || nc.Status.NodeName != node.Name || node.Labels[corev1.LabelHostname] != node.Name {
		t.Errorf("node names do not join: pod %q, claim %q, hostname %q, node %q", pod.Spec.NodeName, nc.Status.NodeName,
			node.Labels[corev1.LabelHostname], node.Name)
	}
	if pod.OwnerReferences[0].Name != rs.Name || pod.Namespace != rs.Namespace {
		t.Errorf("the pod's owner %s/%s is not the ReplicaSet %s/%s", pod.Namespace, pod.OwnerReferences[0].Name, rs.Namespace, rs.Name)
	}
	if r.NodePools[0].Name != "default" || pod.Labels["app"] != "payments" || !r.Anonymized {
		t.Errorf("NodePool names and labels are kept: pool %q, labels %v, anonymized %v", r.NodePools[0].Name, pod.Labels, r.Anonymized)
	}
}

// A file that is not a recording this version reads is refused with the field or value named.
func TestReadRefusesWhatItCannotRead(t *testing.T) {
	_, good := recordFrom(t, source(t), false)
	if _, err := record.Read(strings.NewReader(good)); err != nil {
		t.Fatalf("reading a recording back: %v", err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"unknown field", strings.Replace(good, `"cloudProvider"`, `"cloudProvidr": "x", "cloudProvider"`, 1), `unknown field "cloudProvidr"`},
		{"newer version", strings.Replace(good, record.APIVersion, "capstan.dev/v2", 1), `apiVersion "capstan.dev/v2"`},
		{"other kind", strings.Replace(good, record.Kind, "NodePool", 1), `kind "NodePool"`},
		{"bad requirement", strings.Replace(good, `"operator": "In"`, `"operator": "Near"`, 1), "m5.large"},
		{"not JSON", "{", "not a recording"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := record.Read(strings.NewReader(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// A Get of what the recording lacks is the API server's NotFound, naming the resource as the
// API server names it (its plural, not the kind with an "s").
func TestReaderAnswersNotFoundAsTheAPIServer(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	r := (&record.Recording{}).Reader(s)
	for obj, want := range map[client.Object]schema.GroupResource{
		&karpv1.NodePool{}:              {Group: "karpenter.sh", Resource: "nodepools"},
		&awsv1.EC2NodeClass{}:           {Group: "karpenter.k8s.aws", Resource: "ec2nodeclasses"},
		&policyv1.PodDisruptionBudget{}: {Group: "policy", Resource: "poddisruptionbudgets"},
	} {
		err := r.Get(context.Background(), client.ObjectKey{Name: "gone"}, obj)
		var status apierrors.APIStatus
		if !apierrors.IsNotFound(err) || !errors.As(err, &status) || status.Status().Details == nil ||
			status.Status().Details.Group != want.Group || status.Status().Details.Kind != want.Resource {
			t.Errorf("Get %T: %v; want NotFound of %s", obj, err, want)
		}
	}
}
