// Package tagging tags the EC2 instance of each registered NodeClaim with Name (its node's
// name), karpenter.sh/nodeclaim and eks:eks-cluster-name, as Karpenter's AWS provider does, and
// marks the claim karpenter.k8s.aws/tagged so that it is done once. Consoles, cost reports and
// dashboards key on Name, which is only known once the node registers.
package tagging

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// AnnotationTagged marks a NodeClaim whose instance carries its tags (Karpenter's key, so that
// claims Karpenter tagged are not tagged again after a move to Capstan).
const AnnotationTagged = awsv1.Group + "/tagged"

// Tagger writes the tags (the AWS provider's TagRegistered).
type Tagger interface {
	TagRegistered(ctx context.Context, providerID, claim, nodeName string) ([]string, error)
}

// Controller tags the instances of registered NodeClaims of EC2NodeClasses.
type Controller struct {
	Client client.Client
	Tagger Tagger
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "nodeclaim.tagging" }

// Register adds the controller to mgr, watching the NodeClaims that need tags.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).
		For(&karpv1.NodeClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return needsTags(o.(*karpv1.NodeClaim))
		}))).Complete(c)
}

// needsTags says whether a claim is registered, of an EC2NodeClass, not going away, and not yet
// tagged.
func needsTags(nc *karpv1.NodeClaim) bool {
	ref := nc.Spec.NodeClassRef
	return ref != nil && ref.Group == awsv1.Group && nc.DeletionTimestamp.IsZero() &&
		nc.Annotations[AnnotationTagged] != "true" && nc.Status.ProviderID != "" && nc.Status.NodeName != "" &&
		meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeRegistered)
}

// Reconcile tags one claim's instance and marks the claim. An instance that is gone is left to
// garbage collection; a failed call is retried with controller-runtime's backoff.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nc := &karpv1.NodeClaim{}
	if err := c.Client.Get(ctx, req.NamespacedName, nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !needsTags(nc) {
		return reconcile.Result{}, nil
	}
	wrote, err := c.Tagger.TagRegistered(ctx, nc.Status.ProviderID, nc.Name, nc.Status.NodeName)
	if nf := (*cloudprovider.NodeClaimNotFoundError)(nil); errors.As(err, &nf) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	orig := nc.DeepCopy()
	if nc.Annotations == nil {
		nc.Annotations = map[string]string{}
	}
	nc.Annotations[AnnotationTagged] = "true"
	if err := c.Client.Patch(ctx, nc, client.MergeFrom(orig)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("marking NodeClaim %s tagged: %w", nc.Name, err))
	}
	log.FromContext(ctx).V(1).Info("tagged the instance", "NodeClaim", klog.KObj(nc), "node", nc.Status.NodeName, "tags", wrote)
	return reconcile.Result{}, nil
}
