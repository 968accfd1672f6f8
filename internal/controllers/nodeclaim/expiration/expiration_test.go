package expiration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func TestClaimsExpireAfterExpireAfter(t *testing.T) {
	sim := &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "x"}
	mkOf := func(ref *karpv1.NodeClassReference, name string, d karpv1.NillableDuration) *karpv1.NodeClaim {
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: karpv1.NodeClaimSpec{
			NodeClassRef: ref,
			Requirements: karpv1.Requirements{}, ExpireAfter: d}}
		if err := env.Client.Create(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
		return nc
	}
	mk := func(name string, d karpv1.NillableDuration) *karpv1.NodeClaim { return mkOf(sim, name, d) }
	short := mk("expiring", karpv1.NewDuration(time.Hour))
	never := mk("eternal", karpv1.NeverDuration())
	mkOf(&karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "x"}, "foreign", karpv1.NewDuration(time.Hour))
	clk := clocktesting.NewFakeClock(short.CreationTimestamp.Time)
	c := &Controller{Client: env.Client, Cloud: simtest.New(t, env.Client).Provider, Clock: clk, Recorder: events.NewFakeRecorder(10)}
	reconcileAll := func() {
		for _, name := range []string{"expiring", "eternal", "foreign"} {
			if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	exists := func(name string) bool {
		return env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &karpv1.NodeClaim{}) == nil
	}
	clk.Step(59 * time.Minute)
	reconcileAll()
	if !exists("expiring") {
		t.Fatal("deleted before expireAfter")
	}
	clk.Step(2 * time.Minute)
	reconcileAll()
	if exists("expiring") {
		t.Fatal("not deleted after expireAfter")
	}
	clk.Step(10000 * time.Hour)
	reconcileAll()
	if !exists("eternal") {
		t.Fatal("a NodeClaim with expireAfter Never expired")
	}
	_ = never
	if !exists("foreign") {
		t.Fatal("a claim of another provider's NodeClass kind was expired")
	}
}
