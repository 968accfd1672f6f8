// Package record saves what Capstan's decisions read from a cluster — NodePools, the offerings
// their node classes resolve to, NodeClaims, Nodes, pods' scheduling fields, PodDisruptionBudgets,
// DaemonSets, the owners of pods, namespaces' labels and LimitRanges — into one versioned file,
// and serves it back as a read-only client and cloud provider, so that explain and simulate give
// on a recording the answers they give on the live cluster. Recordings keep no container images,
// commands, environment or volumes other than claims, and may hash every name (Anonymize).
package record

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	karpv1alpha1 "capstan.dev/capstan/api/karpenter/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/versioned"
)

// The file's type. A reader refuses other kinds and versions it does not know.
const (
	APIVersion = "capstan.dev/v1alpha1"
	Kind       = "ClusterRecording"
)

// Recording is the file: the cluster's objects as the decisions read them.
type Recording struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// RecordedAt is when the cluster was read; decisions on the recording are made at that time.
	RecordedAt metav1.Time `json:"recordedAt"`
	// Anonymized says names were replaced by hashes (labels and selectors are kept).
	Anonymized bool `json:"anonymized,omitempty"`
	// CloudProvider is the provider Capstan runs with (sim, aws); NodeClasses the node class kinds
	// it serves, and WellKnownLabels its instance-type label keys.
	CloudProvider   string                  `json:"cloudProvider"`
	NodeClasses     []metav1.GroupKind      `json:"nodeClasses"`
	WellKnownLabels []string                `json:"wellKnownLabels,omitempty"`
	InstanceTypes   []NodeClassInstanceType `json:"instanceTypes"`

	NodePools            []karpv1.NodePool              `json:"nodePools"`
	NodeClaims           []karpv1.NodeClaim             `json:"nodeClaims"`
	Nodes                []corev1.Node                  `json:"nodes"`
	Pods                 []corev1.Pod                   `json:"pods"`
	PodDisruptionBudgets []policyv1.PodDisruptionBudget `json:"podDisruptionBudgets,omitempty"`
	// NodeOverlays are the cluster's NodeOverlays with their conditions (whether Capstan applies
	// them); InstanceTypes are recorded without them.
	NodeOverlays []karpv1alpha1.NodeOverlay `json:"nodeOverlays,omitempty"`
	DaemonSets   []appsv1.DaemonSet         `json:"daemonSets,omitempty"`
	ReplicaSets  []appsv1.ReplicaSet        `json:"replicaSets,omitempty"`
	StatefulSets []appsv1.StatefulSet       `json:"statefulSets,omitempty"`
	Namespaces   []corev1.Namespace         `json:"namespaces,omitempty"`
	// LimitRanges give the DaemonSets' pods their defaults where none of them runs yet.
	LimitRanges []corev1.LimitRange `json:"limitRanges,omitempty"`
}

// NodeClassInstanceType lists the instance types a node class offered, with their offerings.
type NodeClassInstanceType struct {
	// NodeClass is the class as group/kind/name.
	NodeClass     string         `json:"nodeClass"`
	InstanceTypes []InstanceType `json:"types"`
}

// InstanceType is a cloudprovider.InstanceType in the file.
type InstanceType struct {
	Name         string                           `json:"name"`
	Requirements []corev1.NodeSelectorRequirement `json:"requirements"`
	Capacity     corev1.ResourceList              `json:"capacity"`
	Overhead     corev1.ResourceList              `json:"overhead,omitempty"`
	Offerings    []Offering                       `json:"offerings"`
	// VolumeLimits are the CSI volumes a new machine of the type attaches, per driver.
	VolumeLimits map[string]int64 `json:"volumeLimits,omitempty"`
}

// Offering is a cloudprovider.Offering in the file.
type Offering struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacityType"`
	Price        float64 `json:"price"`
	Available    bool    `json:"available"`
}

// Options say how to record.
type Options struct {
	// Now is the recording's time.
	Now time.Time
	// Anonymize replaces every object name, namespace and node name by a hash (salted per
	// recording, so names cannot be guessed back), keeping labels, selectors and NodePool names.
	Anonymize bool
}

// Record reads the cluster as the decisions do and returns the recording.
func Record(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, o Options) (*Recording, error) {
	r := &Recording{APIVersion: APIVersion, Kind: Kind, RecordedAt: metav1.NewTime(o.Now.UTC().Truncate(time.Second)),
		CloudProvider: cloud.Name(), WellKnownLabels: cloud.WellKnownLabels()}
	for _, gk := range cloud.NodeClasses() {
		r.NodeClasses = append(r.NodeClasses, metav1.GroupKind{Group: gk.Group, Kind: gk.Kind})
	}
	lists := []struct {
		what string
		list client.ObjectList
	}{
		{"nodepools", &karpv1.NodePoolList{}}, {"nodeclaims", &karpv1.NodeClaimList{}}, {"nodes", &corev1.NodeList{}},
		{"pods", &corev1.PodList{}}, {"poddisruptionbudgets", &policyv1.PodDisruptionBudgetList{}},
		{"daemonsets", &appsv1.DaemonSetList{}}, {"replicasets", &appsv1.ReplicaSetList{}},
		{"statefulsets", &appsv1.StatefulSetList{}}, {"namespaces", &corev1.NamespaceList{}},
		{"limitranges", &corev1.LimitRangeList{}},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list); err != nil {
			return nil, fmt.Errorf("listing %s: %w", l.what, err)
		}
	}
	r.NodePools = lists[0].list.(*karpv1.NodePoolList).Items
	r.NodeClaims = lists[1].list.(*karpv1.NodeClaimList).Items
	r.Nodes = lists[2].list.(*corev1.NodeList).Items
	r.Pods = lists[3].list.(*corev1.PodList).Items
	r.PodDisruptionBudgets = lists[4].list.(*policyv1.PodDisruptionBudgetList).Items
	r.DaemonSets = lists[5].list.(*appsv1.DaemonSetList).Items
	r.ReplicaSets = lists[6].list.(*appsv1.ReplicaSetList).Items
	r.StatefulSets = lists[7].list.(*appsv1.StatefulSetList).Items
	r.Namespaces = lists[8].list.(*corev1.NamespaceList).Items
	r.LimitRanges = lists[9].list.(*corev1.LimitRangeList).Items
	overlays := &karpv1alpha1.NodeOverlayList{}
	if err := c.List(ctx, overlays); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing nodeoverlays: %w", err)
	}
	r.NodeOverlays = overlays.Items

	seen := map[string]bool{}
	for i := range r.NodePools {
		np := &r.NodePools[i]
		ref := np.Spec.Template.Spec.NodeClassRef
		if !cloudprovider.Manages(cloud, ref) || seen[refKey(ref)] {
			continue
		}
		seen[refKey(ref)] = true
		its, err := cloud.GetInstanceTypes(ctx, np)
		if err != nil {
			// A pool whose class offers nothing now is recorded so: planning says why it is left out.
			continue
		}
		r.InstanceTypes = append(r.InstanceTypes, NodeClassInstanceType{NodeClass: refKey(ref), InstanceTypes: fromInstanceTypes(its)})
	}
	r.trim()
	if o.Anonymize {
		if err := r.anonymize(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// refKey is a node class reference as group/kind/name.
func refKey(ref *karpv1.NodeClassReference) string {
	if ref == nil {
		return ""
	}
	return ref.Group + "/" + ref.Kind + "/" + ref.Name
}

func fromInstanceTypes(its []*cloudprovider.InstanceType) []InstanceType {
	out := make([]InstanceType, 0, len(its))
	for _, it := range its {
		t := InstanceType{Name: it.Name, Capacity: it.Capacity, Overhead: it.Overhead, VolumeLimits: it.VolumeLimits}
		it.Requirements.Each(func(r requirements.Requirement) {
			for _, e := range r.Expressions() {
				t.Requirements = append(t.Requirements, corev1.NodeSelectorRequirement{Key: e.Key,
					Operator: corev1.NodeSelectorOperator(e.Operator), Values: e.Values})
			}
		})
		slices.SortFunc(t.Requirements, func(a, b corev1.NodeSelectorRequirement) int { return strings.Compare(a.Key, b.Key) })
		for _, o := range it.Offerings {
			t.Offerings = append(t.Offerings, Offering{Zone: o.Zone, CapacityType: o.CapacityType, Price: o.Price, Available: o.Available})
		}
		out = append(out, t)
	}
	return out
}

func (t InstanceType) instanceType() (*cloudprovider.InstanceType, error) {
	reqs, err := requirements.FromNodeSelector(t.Requirements)
	if err != nil {
		return nil, fmt.Errorf("instance type %s: requirements: %w", t.Name, err)
	}
	it := &cloudprovider.InstanceType{Name: t.Name, Requirements: reqs, Capacity: t.Capacity, Overhead: t.Overhead, VolumeLimits: t.VolumeLimits}
	for _, o := range t.Offerings {
		it.Offerings = append(it.Offerings, cloudprovider.Offering{Zone: o.Zone, CapacityType: o.CapacityType, Price: o.Price, Available: o.Available})
	}
	return it, nil
}

// keptAnnotations are the annotation keys decisions read; a recording drops the others (they
// are often large, and may hold what users would not share).
func keptAnnotation(key string) bool {
	return strings.HasPrefix(key, "karpenter.sh/") || strings.HasPrefix(key, "capstan.dev/") ||
		strings.HasPrefix(key, "karpenter.k8s.aws/") || key == corev1.PodDeletionCost
}

func trimMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	for k := range m.Annotations {
		if !keptAnnotation(k) {
			delete(m.Annotations, k)
		}
	}
}

// trimPodSpec keeps what scheduling and disruption read: resources, ports, placement rules,
// priority, grace period and claims; images, commands, environment and mounts go.
func trimPodSpec(s *corev1.PodSpec) {
	trim := func(cs []corev1.Container) {
		for i := range cs {
			c := &cs[i]
			*c = corev1.Container{Name: c.Name, Resources: c.Resources, Ports: c.Ports, RestartPolicy: c.RestartPolicy}
		}
	}
	trim(s.Containers)
	trim(s.InitContainers)
	s.EphemeralContainers = nil
	s.ImagePullSecrets = nil
	s.ServiceAccountName, s.DeprecatedServiceAccount = "", ""
	s.Volumes = slices.DeleteFunc(s.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim == nil && v.Ephemeral == nil
	})
}

func (r *Recording) trim() {
	for i := range r.NodePools {
		trimMeta(&r.NodePools[i].ObjectMeta)
	}
	for i := range r.NodeOverlays {
		// Names kept even when anonymised: they order overlays of equal weight.
		trimMeta(&r.NodeOverlays[i].ObjectMeta)
	}
	for i := range r.NodeClaims {
		trimMeta(&r.NodeClaims[i].ObjectMeta)
	}
	for i := range r.Nodes {
		n := &r.Nodes[i]
		trimMeta(&n.ObjectMeta)
		n.Status.Images, n.Status.Addresses, n.Status.VolumesAttached, n.Status.VolumesInUse = nil, nil, nil, nil
		n.Status.NodeInfo = corev1.NodeSystemInfo{}
	}
	for i := range r.Pods {
		p := &r.Pods[i]
		trimMeta(&p.ObjectMeta)
		trimPodSpec(&p.Spec)
		p.Status = corev1.PodStatus{Phase: p.Status.Phase, Conditions: p.Status.Conditions, StartTime: p.Status.StartTime,
			NominatedNodeName: p.Status.NominatedNodeName}
	}
	for i := range r.PodDisruptionBudgets {
		trimMeta(&r.PodDisruptionBudgets[i].ObjectMeta)
	}
	for i := range r.DaemonSets {
		d := &r.DaemonSets[i]
		trimMeta(&d.ObjectMeta)
		trimMeta(&d.Spec.Template.ObjectMeta)
		trimPodSpec(&d.Spec.Template.Spec)
	}
	for i := range r.ReplicaSets {
		rs := &r.ReplicaSets[i]
		trimMeta(&rs.ObjectMeta)
		rs.Spec.Template = corev1.PodTemplateSpec{}
	}
	for i := range r.StatefulSets {
		ss := &r.StatefulSets[i]
		trimMeta(&ss.ObjectMeta)
		ss.Spec.Template = corev1.PodTemplateSpec{}
		ss.Spec.VolumeClaimTemplates = nil
	}
	for i := range r.Namespaces {
		trimMeta(&r.Namespaces[i].ObjectMeta)
	}
	for i := range r.LimitRanges {
		trimMeta(&r.LimitRanges[i].ObjectMeta)
	}
}

// anonymize replaces names by salted hashes, consistently: a pod's nodeName and a node's name,
// a NodeClaim's status.nodeName and the hostname label, provider IDs (they hold node names), an
// owner reference and its owner.
func (r *Recording) anonymize() error {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return fmt.Errorf("anonymizing: %w", err)
	}
	h := func(s string) string {
		if s == "" {
			return ""
		}
		sum := sha256.Sum256(append(slices.Clone(salt), s...))
		return "h" + hex.EncodeToString(sum[:])[:12]
	}
	r.Anonymized = true
	obj := func(m *metav1.ObjectMeta) {
		m.Name, m.Namespace, m.GenerateName = h(m.Name), h(m.Namespace), ""
		for i := range m.OwnerReferences {
			m.OwnerReferences[i].Name = h(m.OwnerReferences[i].Name)
		}
		if v, ok := m.Labels[corev1.LabelHostname]; ok {
			m.Labels[corev1.LabelHostname] = h(v)
		}
	}
	for i := range r.NodeClaims {
		nc := &r.NodeClaims[i]
		obj(&nc.ObjectMeta)
		nc.Status.NodeName, nc.Status.ProviderID = h(nc.Status.NodeName), h(nc.Status.ProviderID)
	}
	for i := range r.Nodes {
		obj(&r.Nodes[i].ObjectMeta)
		r.Nodes[i].Spec.ProviderID = h(r.Nodes[i].Spec.ProviderID)
	}
	for i := range r.Pods {
		p := &r.Pods[i]
		obj(&p.ObjectMeta)
		p.Spec.NodeName, p.Status.NominatedNodeName = h(p.Spec.NodeName), h(p.Status.NominatedNodeName)
		for j := range p.Spec.Volumes {
			if c := p.Spec.Volumes[j].PersistentVolumeClaim; c != nil {
				c.ClaimName = h(c.ClaimName)
			}
		}
	}
	for i := range r.PodDisruptionBudgets {
		obj(&r.PodDisruptionBudgets[i].ObjectMeta)
	}
	for i := range r.DaemonSets {
		obj(&r.DaemonSets[i].ObjectMeta)
	}
	for i := range r.ReplicaSets {
		obj(&r.ReplicaSets[i].ObjectMeta)
	}
	for i := range r.StatefulSets {
		obj(&r.StatefulSets[i].ObjectMeta)
	}
	for i := range r.Namespaces {
		obj(&r.Namespaces[i].ObjectMeta)
	}
	for i := range r.LimitRanges {
		obj(&r.LimitRanges[i].ObjectMeta)
	}
	return nil
}

// Write writes the recording as JSON.
func (r *Recording) Write(w io.Writer) error {
	b, err := jsonIndent(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Read reads a recording (JSON or YAML), refusing unknown fields, other kinds and versions.
func Read(in io.Reader) (*Recording, error) {
	r := &Recording{}
	if err := versioned.Read(in, APIVersion, Kind, "recording", r); err != nil {
		return nil, err
	}
	for _, c := range r.InstanceTypes {
		for _, t := range c.InstanceTypes {
			if _, err := t.instanceType(); err != nil {
				return nil, fmt.Errorf("instanceTypes[%s]: %w", c.NodeClass, err)
			}
		}
	}
	return r, nil
}

// groupKinds are the recorded node class kinds in the cloud provider's terms.
func (r *Recording) groupKinds() []schema.GroupKind {
	out := make([]schema.GroupKind, 0, len(r.NodeClasses))
	for _, gk := range r.NodeClasses {
		out = append(out, schema.GroupKind{Group: gk.Group, Kind: gk.Kind})
	}
	return out
}
