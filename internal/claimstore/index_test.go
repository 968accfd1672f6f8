package claimstore

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// startCache starts an informer cache over the test API server, with the provider ID indexes
// when indexed is set, and waits for it to hold what exists now.
func startCache(t *testing.T, indexed bool) cache.Cache {
	t.Helper()
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if indexed {
		if err := IndexProviderIDs(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	// Informers start on first use: touch both kinds, then wait.
	_ = c.List(t.Context(), &corev1.NodeList{})
	_ = c.List(t.Context(), &karpv1.NodeClaimList{})
	if !c.WaitForCacheSync(t.Context()) {
		t.Fatal("cache did not sync")
	}
	return c
}

func TestProviderIDLookupsThroughIndexAndAPIServer(t *testing.T) {
	ids := []string{"sim:///zone-a/i-index-1", "sim:///zone-a/i-index-2", "sim:///zone-b/i-index-3"}
	for i, id := range ids {
		name := []string{"index-1", "index-2", "index-3"}[i]
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: id}}
		if err := env.Client.Create(t.Context(), node); err != nil {
			t.Fatal(err)
		}
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: "sim.capstan.dev", Kind: "SimNodeClass", Name: "default"},
				Requirements: karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}}}
		if err := env.Client.Create(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
		nc.Status.ProviderID = id
		if err := env.Client.Status().Update(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
	}
	readers := map[string]client.Reader{"api-server": env.Client, "indexed-cache": startCache(t, true)}
	for name, r := range readers {
		t.Run(name, func(t *testing.T) {
			for i, id := range ids {
				want := []string{"index-1", "index-2", "index-3"}[i]
				// No node name recorded on the claim: the lookup goes by provider ID.
				node, err := NodeFor(t.Context(), r, &karpv1.NodeClaim{Status: karpv1.NodeClaimStatus{ProviderID: id}})
				if err != nil || node == nil || node.Name != want {
					t.Errorf("NodeFor(%s) = %v, %v; want node %s", id, node, err, want)
				}
				reqs := ClaimForNode(r)(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.NodeSpec{ProviderID: id}})
				if len(reqs) != 1 || reqs[0].Name != want {
					t.Errorf("ClaimForNode(%s) = %v; want claim %s", id, reqs, want)
				}
			}
			node, err := NodeFor(t.Context(), r, &karpv1.NodeClaim{Status: karpv1.NodeClaimStatus{ProviderID: "sim:///zone-a/i-none"}})
			if err != nil || node != nil {
				t.Errorf("NodeFor(unknown provider ID) = %v, %v; want nil, nil", node, err)
			}
		})
	}
}

// A cache the operator forgot to index must fail loudly, not fall back to copying every object.
func TestProviderIDLookupWithoutIndexIsAnError(t *testing.T) {
	c := startCache(t, false)
	if _, err := NodeFor(t.Context(), c, &karpv1.NodeClaim{Status: karpv1.NodeClaimStatus{ProviderID: "sim:///zone-a/i-1"}}); err == nil {
		t.Error("NodeFor through a cache without the provider ID index succeeded; want an error")
	}
}
