package apivalidation

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// create creates obj for real and deletes it when the test ends.
func create(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	})
}

func wantInvalid(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want rejection mentioning %q", want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v; want an Invalid error", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q does not contain %q", err.Error(), w)
		}
	}
}

func TestNodeClaimSpecIsImmutable(t *testing.T) {
	nc := object(t, baseNodeClaim, "", uniqueName(t))
	create(t, nc)

	changed := nc.DeepCopy()
	if err := unstructured.SetNestedField(changed.Object, "48h", "spec", "expireAfter"); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, env.Client.Update(t.Context(), changed), "spec", "spec is immutable")

	relabelled := nc.DeepCopy()
	relabelled.SetLabels(map[string]string{"team": "orders"})
	if err := env.Client.Update(t.Context(), relabelled); err != nil {
		t.Fatalf("updating metadata of a NodeClaim: %v", err)
	}
}

func TestNodeClaimStatusIsWritable(t *testing.T) {
	nc := object(t, baseNodeClaim, "", uniqueName(t))
	create(t, nc)
	status := map[string]any{
		"providerID": "sim:///zone-a/i-0001",
		"nodeName":   "node-1",
		"imageID":    "sim-image-1",
		"capacity":   map[string]any{"cpu": "2", "memory": "8Gi", "pods": "29"},
		"conditions": []any{map[string]any{
			"type": "Launched", "status": "True", "reason": "Launched", "message": "",
			"lastTransitionTime": "2026-11-30T10:00:00Z",
		}},
	}
	if err := unstructured.SetNestedMap(nc.Object, status, "status"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatalf("updating status: %v", err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(nc.GroupVersionKind())
	if err := env.Client.Get(t.Context(), clientKey(nc), got); err != nil {
		t.Fatal(err)
	}
	if id, _, _ := unstructured.NestedString(got.Object, "status", "providerID"); id != "sim:///zone-a/i-0001" {
		t.Fatalf("status.providerID = %q after the update", id)
	}
}

func TestNodePoolNodeClassGroupAndKindAreImmutable(t *testing.T) {
	np := object(t, baseNodePool, "", uniqueName(t))
	create(t, np)
	for _, field := range []string{"group", "kind"} {
		changed := np.DeepCopy()
		if err := unstructured.SetNestedField(changed.Object, "Other", "spec", "template", "spec", "nodeClassRef", field); err != nil {
			t.Fatal(err)
		}
		wantInvalid(t, env.Client.Update(t.Context(), changed), "spec.template.spec.nodeClassRef", "nodeClassRef."+field+" is immutable")
	}
	renamed := np.DeepCopy()
	if err := unstructured.SetNestedField(renamed.Object, "other", "spec", "template", "spec", "nodeClassRef", "name"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(t.Context(), renamed); err != nil {
		t.Fatalf("changing nodeClassRef.name: %v", err)
	}
}

func TestEC2NodeClassRoleCannotBecomeInstanceProfile(t *testing.T) {
	nc := object(t, baseEC2NodeClass, "", uniqueName(t))
	create(t, nc)
	changed := nc.DeepCopy()
	unstructured.RemoveNestedField(changed.Object, "spec", "role")
	if err := unstructured.SetNestedField(changed.Object, "KarpenterNodeProfile", "spec", "instanceProfile"); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, env.Client.Update(t.Context(), changed), "spec", "changing from 'role' to 'instanceProfile'")

	otherRole := nc.DeepCopy()
	if err := unstructured.SetNestedField(otherRole.Object, "OtherRole", "spec", "role"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(t.Context(), otherRole); err != nil {
		t.Fatalf("changing the role: %v", err)
	}
}

func TestNodePoolCannotSwitchBetweenStaticAndDynamic(t *testing.T) {
	np := object(t, baseNodePool, "", uniqueName(t))
	create(t, np)
	static := np.DeepCopy()
	if err := unstructured.SetNestedField(static.Object, int64(3), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, env.Client.Update(t.Context(), static), "spec", "Cannot transition NodePool between static (replicas set) and dynamic")

	sp := object(t, baseNodePool, "spec: {replicas: 1}", uniqueName(t)+"-static")
	create(t, sp)
	scaled := sp.DeepCopy()
	if err := unstructured.SetNestedField(scaled.Object, int64(4), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(t.Context(), scaled); err != nil {
		t.Fatalf("scaling a static NodePool: %v", err)
	}
}
