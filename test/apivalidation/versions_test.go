package apivalidation

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	"capstan.dev/capstan/config/crd"
)

// A ProvisioningRequest written as the deprecated v1beta1 (Kueue's and Cluster Autoscaler's older
// manifests) is validated as v1 is and read back as v1, the version Capstan works in.
func TestProvisioningRequestV1beta1IsServedAsV1(t *testing.T) {
	manifest := func(name, podSets string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(`
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: ProvisioningRequest
metadata: {name: `+name+`, namespace: default}
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
  parameters: {ValidUntilSeconds: "600"}
  podSets: `+podSets+`
`), &u.Object); err != nil {
			t.Fatal(err)
		}
		return u
	}
	create(t, manifest("gang-v1beta1", `[{podTemplateRef: {name: workers}, count: 4}]`))
	pr := &autoscalingv1.ProvisioningRequest{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "gang-v1beta1"}, pr); err != nil {
		t.Fatal(err)
	}
	if len(pr.Spec.PodSets) != 1 || pr.Spec.PodSets[0].Count != 4 || pr.Spec.PodSets[0].PodTemplateRef.Name != "workers" ||
		pr.Spec.Parameters[autoscalingv1.ParameterValidUntilSeconds] != "600" {
		t.Fatalf("read as v1: %+v", pr.Spec)
	}
	wantInvalid(t, env.Client.Create(t.Context(), manifest("empty-v1beta1", `[]`)), "spec.podSets")
}

// Cluster Autoscaler's CRD may list v1beta1 in status.storedVersions (objects it stored as
// v1beta1); the API server refuses a CRD whose versions drop one stored, so Capstan's CRD must
// serve v1beta1 for the capstan-crd chart to take that CRD over.
func TestProvisioningRequestCRDTakesOverStoredV1beta1(t *testing.T) {
	ctx := t.Context()
	cur := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "provisioningrequests.autoscaling.x-k8s.io"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Status.StoredVersions = []string{"v1beta1", "v1"}
	if err := env.Client.Status().Update(ctx, cur); err != nil {
		t.Fatalf("storing v1beta1 as Cluster Autoscaler's CRD would: %v", err)
	}
	crds, err := crd.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds {
		if c.Name != cur.Name {
			continue
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: c.Name}, cur); err != nil {
			t.Fatal(err)
		}
		// As the chart's upgrade does: Capstan's spec over the CRD in place.
		cur.Spec = c.Spec
		if err := env.Client.Update(ctx, cur); err != nil {
			t.Fatalf("Capstan's CRD over one storing v1beta1: %v", err)
		}
		return
	}
	t.Fatalf("no %s among Capstan's CRDs", cur.Name)
}
