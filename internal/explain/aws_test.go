package explain

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/controllers/ec2nodeclass"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// The runbook's orders pool on the AWS provider (on-demand, amd64, categories c/m/r, generation
// > 5): explain nodepool counts and shows only the types those requirements admit, the count
// being that of the class's types whose labels and on-demand offerings satisfy them.
func TestExplainNodePoolListsWhatTheRunbookPoolAdmits(t *testing.T) {
	ctx := t.Context()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	create(t, nc)
	t.Cleanup(func() {
		got := &awsv1.EC2NodeClass{}
		if env.Client.Get(context.Background(), client.ObjectKeyFromObject(nc), got) == nil {
			got.Finalizers = nil
			_ = env.Client.Update(context.Background(), got)
		}
	})
	if _, err := (&ec2nodeclass.Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}).
		Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}); err != nil {
		t.Fatal(err)
	}
	create(t, np)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nc), nc); err != nil {
		t.Fatal(err)
	}
	its, err := f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	admits := func(l map[string]string) bool {
		gen, _ := strconv.Atoi(l[awsv1.LabelInstanceGeneration])
		c := l[awsv1.LabelInstanceCategory]
		return (c == "c" || c == "m" || c == "r") && gen > 5 && l[corev1.LabelArchStable] == "amd64"
	}
	want, labels := 0, map[string]map[string]string{}
	for _, it := range its {
		l := map[string]string{}
		for _, k := range []string{awsv1.LabelInstanceGeneration, awsv1.LabelInstanceCategory, corev1.LabelArchStable} {
			if r, ok := it.Requirements.Get(k); ok && len(r.Values()) == 1 {
				l[k] = r.Values()[0]
			}
		}
		labels[it.Name] = l
		onDemand := false
		for _, o := range it.Offerings {
			onDemand = onDemand || o.Available && o.CapacityType == karpv1.CapacityTypeOnDemand
		}
		if admits(l) && onDemand {
			want++
		}
	}
	a, err := NodePool(ctx, env.Client, f.Provider, planning.Settings{}, time.Now(), np.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Managed || a.InstanceTypes != want || want == 0 || want >= len(its) {
		t.Fatalf("answer %+v: want %d of the class's %d types admitted", a, want, len(its))
	}
	for _, c := range a.Cheapest {
		if !admits(labels[c.Name]) {
			t.Errorf("cheapest lists %s (%v), which the pool's requirements refuse", c.Name, labels[c.Name])
		}
	}
	var out strings.Builder
	if err := a.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if line := strconv.Itoa(want) + " instance type(s) admitted; cheapest: "; !strings.Contains(out.String(), line) {
		t.Errorf("explain nodepool printed:\n%s\nwant %q", out.String(), line)
	}
}
