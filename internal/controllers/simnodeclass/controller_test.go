package simnodeclass

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const oneType = `[{"name": "c-1x", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "2Gi"},
 "offerings": [{"Price": 0.03, "Available": true, "Requirements": [
   {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
   {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}]}]`

func TestStatusNamesTheBadEntryAndRecovers(t *testing.T) {
	ctx := t.Context()
	sc := simtest.New(t, env.Client)
	c := &Controller{Client: env.Client, Provider: sc.Provider, Clock: sc.Clock}
	snc := simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok-menu"},
		Spec: simv1alpha1.SimNodeClassSpec{InstanceTypesFrom: &simv1alpha1.InstanceTypesSource{
			ConfigMap: simv1alpha1.ConfigMapKeyReference{Namespace: "default", Name: "kwok-menu"}}}})
	reconcileAndGet := func() *metav1.Condition {
		t.Helper()
		if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(snc)}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(snc), snc); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(snc.Status.Conditions, simv1alpha1.ConditionTypeReady)
	}
	if cond := reconcileAndGet(); cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "ConfigMap default/kwok-menu not found") {
		t.Fatalf("without the ConfigMap: %+v", cond)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kwok-menu"},
		Data: map[string]string{"instance_types.json": strings.Replace(oneType, `"Price": 0.03`, `"Price": -0.03`, 1)}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, cm) })
	if cond := reconcileAndGet(); cond == nil || cond.Status != metav1.ConditionFalse ||
		!strings.Contains(cond.Message, `instance type [0] "c-1x": offerings[0].Price: -0.03 is not a price`) {
		t.Fatalf("with a negative price: %+v", cond)
	}
	orig := cm.DeepCopy()
	cm.Data["instance_types.json"] = oneType
	if err := env.Client.Patch(ctx, cm, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if cond := reconcileAndGet(); cond == nil || cond.Status != metav1.ConditionTrue || snc.Status.InstanceTypes != 1 {
		t.Fatalf("with a good list: %+v, %d types", cond, snc.Status.InstanceTypes)
	}
	its, err := sc.Provider.InstanceTypes(ctx, snc)
	if err != nil || len(its) != 1 || its[0].Offerings[0].Zone != "test-zone-a" || its[0].Offerings[0].Price != 0.03 {
		t.Fatalf("instance types %v, %v", its, err)
	}
}
