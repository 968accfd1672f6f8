package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
)

func jsonIndent(v any) ([]byte, error) { return json.MarshalIndent(v, "", " ") }

// Reader serves the recording's objects as a read-only client: Get and List (with a namespace
// and a label selector) over copies, as an API server would answer at the time of recording.
func (r *Recording) Reader(scheme *runtime.Scheme) client.Reader {
	objs := map[schema.GroupVersionKind][]client.Object{}
	add := func(o client.Object) {
		gvk, err := apiutil.GVKForObject(o, scheme)
		if err == nil {
			objs[gvk] = append(objs[gvk], o)
		}
	}
	for i := range r.NodePools {
		add(&r.NodePools[i])
	}
	for i := range r.NodeClaims {
		add(&r.NodeClaims[i])
	}
	for i := range r.Nodes {
		add(&r.Nodes[i])
	}
	for i := range r.Pods {
		add(&r.Pods[i])
	}
	for i := range r.PodDisruptionBudgets {
		add(&r.PodDisruptionBudgets[i])
	}
	for i := range r.DaemonSets {
		add(&r.DaemonSets[i])
	}
	for i := range r.ReplicaSets {
		add(&r.ReplicaSets[i])
	}
	for i := range r.StatefulSets {
		add(&r.StatefulSets[i])
	}
	for i := range r.Namespaces {
		add(&r.Namespaces[i])
	}
	for i := range r.NodeOverlays {
		add(&r.NodeOverlays[i])
	}
	for i := range r.LimitRanges {
		add(&r.LimitRanges[i])
	}
	return &reader{scheme: scheme, objs: objs}
}

type reader struct {
	scheme *runtime.Scheme
	objs   map[schema.GroupVersionKind][]client.Object
}

func (r *reader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, r.scheme)
	if err != nil {
		return err
	}
	for _, o := range r.objs[gvk] {
		if o.GetNamespace() == key.Namespace && o.GetName() == key.Name {
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
			return nil
		}
	}
	// The resource as the API server would name it in its answer (kinds ending in "s", "y" … take
	// their plural as Kubernetes forms it: ec2nodeclasses, policies).
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return apierrors.NewNotFound(plural.GroupResource(), key.Name)
}

func (r *reader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := apiutil.GVKForObject(list, r.scheme)
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		return errors.New("a recording answers no field selector")
	}
	var items []runtime.Object
	for _, o := range r.objs[gvk] {
		if lo.Namespace != "" && o.GetNamespace() != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		items = append(items, o.DeepCopyObject())
	}
	return meta.SetList(list, items)
}

// Cloud is the recording's cloud provider: its node classes, label keys and recorded offerings.
// It launches, deletes and looks up nothing, and says no machine has drifted (drift as recorded
// is on the NodeClaims' conditions).
func (r *Recording) Cloud() (cloudprovider.CloudProvider, error) {
	c := &cloud{r: r, types: map[string][]*cloudprovider.InstanceType{}}
	for _, nc := range r.InstanceTypes {
		for _, t := range nc.InstanceTypes {
			it, err := t.instanceType()
			if err != nil {
				return nil, fmt.Errorf("instanceTypes[%s]: %w", nc.NodeClass, err)
			}
			c.types[nc.NodeClass] = append(c.types[nc.NodeClass], it)
		}
	}
	return c, nil
}

type cloud struct {
	r     *Recording
	types map[string][]*cloudprovider.InstanceType
}

// errRecorded is what the calls that would act on machines return.
var errRecorded = errors.New("a recording launches, deletes and looks up no machine")

func (c *cloud) Create(context.Context, *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	return nil, errRecorded
}
func (c *cloud) Delete(context.Context, *karpv1.NodeClaim) error { return errRecorded }
func (c *cloud) Get(context.Context, string) (*karpv1.NodeClaim, error) {
	return nil, errRecorded
}
func (c *cloud) List(context.Context) ([]*karpv1.NodeClaim, error) { return nil, errRecorded }
func (c *cloud) IsDrifted(context.Context, *karpv1.NodeClaim) (cloudprovider.DriftReason, error) {
	return "", nil
}
func (c *cloud) Name() string                    { return c.r.CloudProvider }
func (c *cloud) WellKnownLabels() []string       { return c.r.WellKnownLabels }
func (c *cloud) NodeClasses() []schema.GroupKind { return c.r.groupKinds() }

// GetInstanceTypes returns the types recorded for the NodePool's node class.
func (c *cloud) GetInstanceTypes(_ context.Context, np *karpv1.NodePool) ([]*cloudprovider.InstanceType, error) {
	key := refKey(np.Spec.Template.Spec.NodeClassRef)
	its, ok := c.types[key]
	if !ok {
		return nil, fmt.Errorf("node class %s: the recording holds no offerings for it", key)
	}
	return its, nil
}
