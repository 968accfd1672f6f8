// Command leaving measures how long the pods of a node going away wait for a machine, on a
// cluster whose autoscaler speaks Karpenter's v1 API (Capstan, or Karpenter's kwok provider): it
// makes a NodePool and a Deployment, deletes the pool's NodeClaims once every pod runs, and
// reads, for every pod that replaces an evicted one, the seconds from its creation to its
// binding. hack/scaledown.sh runs it on a fresh local cluster with MEASURE=leaving.
//
//	leaving --scenario do-not-disrupt --node-class karpenter.kwok.sh/KWOKNodeClass/default
//
// Scenarios: do-not-disrupt (one pod annotated karpenter.sh/do-not-disrupt on a pool with a 60 s
// terminationGracePeriod: the drain waits, then forces it out) and pdb (ten pods under a
// PodDisruptionBudget with maxUnavailable 1: the drain moves one at a time). The last line
// printed is a JSON summary.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/scheme"
)

const (
	namespace = "default"
	app       = "leaving"
	poolName  = "default"
)

// summary is the JSON line the command ends with.
type summary struct {
	Scenario string `json:"scenario"`
	// Pending are the seconds each successor pod waited, from when it was first seen to when it
	// was seen bound, in the order they were created.
	Pending []float64 `json:"pendingSeconds"`
	Max     float64   `json:"maxPendingSeconds"`
	Sum     float64   `json:"sumPendingSeconds"`
	// ClaimsAfter counts the NodeClaims created after the first successor pod appeared: machines
	// launched for pods already evicted.
	ClaimsAfter int `json:"claimsAfterFirstEviction"`
	// Drained is how long the deleted claims took to go, in seconds.
	Drained float64 `json:"drainedSeconds"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "leaving:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "the cluster's kubeconfig")
	sc := flag.String("scenario", "do-not-disrupt", "do-not-disrupt or pdb")
	nodeClass := flag.String("node-class", "capstan.dev/SimNodeClass/default", "the NodePool's nodeClassRef as group/kind/name")
	flag.String("menu", "", "accepted for hack/scaledown.sh; unused")
	flag.String("policy", "", "accepted for hack/scaledown.sh; unused")
	flag.Parse()
	if *sc != "do-not-disrupt" && *sc != "pdb" {
		return fmt.Errorf("--scenario %q: want do-not-disrupt or pdb", *sc)
	}
	ref := strings.Split(*nodeClass, "/")
	if len(ref) != 3 {
		return fmt.Errorf("--node-class %q: want group/kind/name", *nodeClass)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	s, err := scheme.New()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return measure(ctx, c, *sc, ref)
}

func measure(ctx context.Context, c client.Client, sc string, ref []string) error {
	replicas := int32(10)
	if sc == "do-not-disrupt" {
		replicas = 1
	}
	if err := apply(ctx, c, sc, ref, replicas); err != nil {
		return err
	}
	if err := waitFor(ctx, 5*time.Minute, func() (bool, error) {
		pods, err := running(ctx, c)
		return len(pods) == int(replicas), err
	}); err != nil {
		return fmt.Errorf("waiting for %d pods Running: %w", replicas, err)
	}
	before, err := running(ctx, c)
	if err != nil {
		return err
	}
	old := map[types.UID]bool{}
	for _, p := range before {
		old[p.UID] = true
		if sc == "do-not-disrupt" {
			orig := p.DeepCopy()
			p.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
			if err := c.Patch(ctx, &p, client.MergeFrom(orig)); err != nil {
				return fmt.Errorf("annotating pod %s: %w", p.Name, err)
			}
		}
	}
	// Both autoscalers' caches see the annotation and the PDB's status before the deletion.
	time.Sleep(5 * time.Second)
	claims := &karpv1.NodeClaimList{}
	if err := c.List(ctx, claims, client.MatchingLabels{karpv1.NodePoolLabelKey: poolName}); err != nil {
		return err
	}
	deleted := map[string]bool{}
	start := time.Now()
	for i := range claims.Items {
		if err := c.Delete(ctx, &claims.Items[i]); err != nil {
			return fmt.Errorf("deleting nodeclaim %s: %w", claims.Items[i].Name, err)
		}
		deleted[claims.Items[i].Name] = true
	}
	fmt.Fprintf(os.Stderr, "deleted %d nodeclaim(s) holding %d pod(s)\n", len(deleted), len(before))
	return watch(ctx, c, sc, old, deleted, start, int(replicas))
}

// watch polls the pods and claims until every old pod has a bound successor and the deleted
// claims are gone, and prints what it read.
func watch(ctx context.Context, c client.Client, sc string, old map[types.UID]bool, deleted map[string]bool, start time.Time, want int) error {
	seen, bound := map[types.UID]time.Time{}, map[types.UID]time.Time{}
	var firstSuccessor time.Time
	var drained time.Duration
	claimsAfter := map[string]bool{}
	err := waitFor(ctx, 10*time.Minute, func() (bool, error) {
		now := time.Now()
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{"app": app}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if old[p.UID] {
				continue
			}
			if _, ok := seen[p.UID]; !ok {
				seen[p.UID] = now
				if firstSuccessor.IsZero() {
					firstSuccessor = now
				}
			}
			if _, ok := bound[p.UID]; !ok && p.Spec.NodeName != "" {
				bound[p.UID] = now
			}
		}
		claims := &karpv1.NodeClaimList{}
		if err := c.List(ctx, claims, client.MatchingLabels{karpv1.NodePoolLabelKey: poolName}); err != nil {
			return false, err
		}
		left := 0
		for _, nc := range claims.Items {
			if deleted[nc.Name] {
				left++
			} else if !firstSuccessor.IsZero() && nc.CreationTimestamp.After(firstSuccessor.Add(-time.Second)) && !claimsAfter[nc.Name] {
				// The API's seconds: a claim created in the second the first successor appeared
				// or later.
				claimsAfter[nc.Name] = true
			}
		}
		if left == 0 && drained == 0 {
			drained = time.Since(start)
		}
		return left == 0 && len(bound) >= want, nil
	})
	if err != nil {
		return err
	}
	var uids []types.UID
	for uid := range seen {
		uids = append(uids, uid)
	}
	slices.SortFunc(uids, func(a, b types.UID) int { return seen[a].Compare(seen[b]) })
	out := summary{Scenario: sc, ClaimsAfter: len(claimsAfter), Drained: drained.Seconds()}
	for _, uid := range uids {
		if b, ok := bound[uid]; ok {
			d := b.Sub(seen[uid]).Seconds()
			out.Pending = append(out.Pending, d)
			out.Max, out.Sum = max(out.Max, d), out.Sum+d
		}
	}
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// running are the Deployment's pods that are Running and not being deleted.
func running(ctx context.Context, c client.Client) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{"app": app}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return p.Status.Phase != corev1.PodRunning || !p.DeletionTimestamp.IsZero()
	}), nil
}

// apply creates the NodePool (on-demand amd64; a 60 s terminationGracePeriod), the Deployment of
// 1-CPU pods, and for pdb the PodDisruptionBudget.
func apply(ctx context.Context, c client.Client, sc string, ref []string, replicas int32) error {
	pool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &karpv1.NodeClassReference{Group: ref[0], Kind: ref[1], Name: ref[2]},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
					{Key: corev1.LabelArchStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"amd64"}},
					{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}},
				},
				TerminationGracePeriod: &metav1.Duration{Duration: 60 * time.Second},
			}},
			Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty,
				ConsolidateAfter: karpv1.MustParseNillableDuration("30s")},
		}}
	if err := c.Create(ctx, pool); err != nil {
		return fmt.Errorf("creating the NodePool: %w", err)
	}
	labels := map[string]string{"app": app}
	grace := int64(0)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
					Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
				}}}}}}
	if err := c.Create(ctx, d); err != nil {
		return fmt.Errorf("creating the Deployment: %w", err)
	}
	if sc != "pdb" {
		return nil
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if err := c.Create(ctx, pdb); err != nil {
		return fmt.Errorf("creating the PodDisruptionBudget: %w", err)
	}
	return nil
}

// waitFor polls cond every 200 ms until it holds, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
