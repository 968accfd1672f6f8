// Package ec2nodeclass resolves EC2NodeClasses: their subnet, security group and AMI selector
// terms into status.subnets, status.securityGroups and status.amis, their role into an instance
// profile, and Ready with a message naming whatever did not resolve. It re-resolves
// periodically (a newer AMI behind an alias, a subnet tagged later) and holds a class in use
// until its NodeClaims are gone.
package ec2nodeclass

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
)

// Finalizer holds a class until no NodeClaim uses it.
const Finalizer = awsv1.Group + "/termination"

// ResyncPeriod is how often a class is resolved again when Controller.Resync is not set
// (Karpenter's default refresh interval).
const ResyncPeriod = time.Minute

// Controller resolves EC2NodeClasses.
type Controller struct {
	Client   client.Client
	Provider *aws.Provider
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	// Resync is how often a class is resolved again (default ResyncPeriod): the shortest of
	// the AMI, subnet and security-group refresh intervals.
	Resync time.Duration
}

func (c *Controller) resync() time.Duration {
	if c.Resync > 0 {
		return c.Resync
	}
	return ResyncPeriod
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "ec2nodeclass" }

// Register adds the controller to a manager; a NodeClaim's deletion requeues its class (which
// may be waiting for its last claim).
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&awsv1.EC2NodeClass{}).
		Watches(&karpv1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			ref := o.(*karpv1.NodeClaim).Spec.NodeClassRef
			if ref == nil || ref.Group != awsv1.Group || o.GetDeletionTimestamp().IsZero() {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: ref.Name}}}
		})).Complete(c)
}

// Reconcile resolves one class.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nc := &awsv1.EC2NodeClass{}
	if err := c.Client.Get(ctx, req.NamespacedName, nc); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, c.forgetGone(ctx)
		}
		return reconcile.Result{}, err
	}
	if !nc.DeletionTimestamp.IsZero() {
		return c.finalize(ctx, nc)
	}
	if !controllerutil.ContainsFinalizer(nc, Finalizer) {
		stored := nc.DeepCopy()
		controllerutil.AddFinalizer(nc, Finalizer)
		if err := c.Client.Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	stored := nc.DeepCopy()
	errs := c.resolve(ctx, nc)
	if !equality.Semantic.DeepEqual(stored.Status, nc.Status) {
		// Locked on the version read: the status is lists (subnets, security groups, AMIs,
		// conditions) that a merge patch writes whole. On a conflict the class is read again.
		if err := c.Client.Status().Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		} else if err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("patching EC2NodeClass status: %w", err))
		}
	}
	if len(errs) == 0 {
		if err := c.Provider.GarbageCollectTemplates(ctx, nc); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := errors.Join(errs...); err != nil && !onlyEmpty(errs) {
		// A failed call (throttling, an endpoint down, expired credentials) is retried with
		// backoff; a selector matching nothing waits for the next resync.
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: c.resync()}, nil
}

// onlyEmpty reports whether every error is a selector that matched nothing (not a failed call).
func onlyEmpty(errs []error) bool {
	for _, err := range errs {
		var re *aws.ResolveError
		if !errors.As(err, &re) || !re.Empty {
			return false
		}
	}
	return true
}

// resolve fills status and conditions; it returns what failed.
func (c *Controller) resolve(ctx context.Context, nc *awsv1.EC2NodeClass) []error {
	now := metav1.NewTime(c.Clock.Now())
	set := func(t string, err error, okReason string) {
		cond := metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: okReason, ObservedGeneration: nc.Generation, LastTransitionTime: now}
		if err != nil {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "ResolutionFailed", err.Error()
			var re *aws.ResolveError
			if errors.As(err, &re) {
				cond.Reason = re.Reason
			}
		}
		meta.SetStatusCondition(&nc.Status.Conditions, cond)
	}
	var errs []error
	subnets, err := c.Provider.ResolveSubnets(ctx, nc)
	if err == nil {
		nc.Status.Subnets = subnets
	} else {
		nc.Status.Subnets = nil
		errs = append(errs, err)
	}
	set(awsv1.ConditionTypeSubnetsReady, err, "SubnetsResolved")
	groups, err := c.Provider.ResolveSecurityGroups(ctx, nc)
	if err == nil {
		nc.Status.SecurityGroups = groups
	} else {
		nc.Status.SecurityGroups = nil
		errs = append(errs, err)
	}
	set(awsv1.ConditionTypeSecurityGroupsReady, err, "SecurityGroupsResolved")
	amis, err := c.Provider.ResolveAMIs(ctx, nc)
	if err == nil {
		nc.Status.AMIs = amis
	} else {
		nc.Status.AMIs = nil
		errs = append(errs, err)
	}
	set(awsv1.ConditionTypeAMIsReady, err, "AMIsResolved")
	profile, err := c.Provider.ResolveInstanceProfile(ctx, nc)
	if err == nil {
		nc.Status.InstanceProfile = profile
	} else {
		errs = append(errs, err)
	}
	set(awsv1.ConditionTypeInstanceProfileReady, err, "InstanceProfileResolved")
	reservations, err := c.Provider.ResolveCapacityReservations(ctx, nc)
	if err == nil {
		nc.Status.CapacityReservations = reservations
	} else {
		nc.Status.CapacityReservations = nil
		errs = append(errs, err)
	}
	set(awsv1.ConditionTypeCapacityReservationsReady, err, "CapacityReservationsResolved")
	if c.Provider.ReservedCapacityDisabled() && len(nc.Spec.CapacityReservationSelectorTerms) > 0 {
		cond := meta.FindStatusCondition(nc.Status.Conditions, awsv1.ConditionTypeCapacityReservationsReady)
		cond.Reason, cond.Message = "FeatureGateDisabled", "the ReservedCapacity feature gate is off: capacityReservationSelectorTerms are ignored"
	}
	dropped, err := aws.ValidateUserData(nc)
	if err != nil {
		err = &aws.ResolveError{Condition: awsv1.ConditionTypeValidationSucceeded, Reason: "UserDataInvalid", Empty: true, Err: err}
	} else if kerr := amifamily.ValidateKubelet(nc.Spec.Kubelet); kerr != nil {
		err = &aws.ResolveError{Condition: awsv1.ConditionTypeValidationSucceeded, Reason: "KubeletConfigurationInvalid", Empty: true, Err: kerr}
	}
	if err != nil {
		errs = append(errs, err)
	}
	set(awsv1.ConditionTypeValidationSucceeded, err, "ValidationSucceeded")
	if len(dropped) > 0 {
		// What the image family would refuse is left out of the user data, and said here.
		cond := meta.FindStatusCondition(nc.Status.Conditions, awsv1.ConditionTypeValidationSucceeded)
		cond.Message = "left out of the " + string(amifamily.Of(&nc.Spec)) + " user data (the image would refuse or cannot apply them): " + strings.Join(dropped, ", ")
	}
	ready := metav1.Condition{Type: awsv1.ConditionTypeReady, Status: metav1.ConditionTrue, Reason: "Ready", ObservedGeneration: nc.Generation, LastTransitionTime: now}
	if len(errs) > 0 {
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "NotResolved", strings.Join(msgs, "; ")
		var re *aws.ResolveError
		if errors.As(errs[0], &re) {
			ready.Reason = re.Reason
		}
	}
	meta.SetStatusCondition(&nc.Status.Conditions, ready)
	return errs
}

// forgetGone drops what the provider keeps for classes that no longer exist.
func (c *Controller) forgetGone(ctx context.Context) error {
	classes := &awsv1.EC2NodeClassList{}
	if err := c.Client.List(ctx, classes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing ec2nodeclasses: %w", err)
	}
	live := make(map[types.UID]bool, len(classes.Items))
	for i := range classes.Items {
		live[classes.Items[i].UID] = true
	}
	c.Provider.ForgetClasses(func(uid types.UID) bool { return live[uid] })
	return nil
}

// finalize waits for the class's NodeClaims to go, deletes the launch templates and instance
// profile Capstan made for it, then lets the class go.
func (c *Controller) finalize(ctx context.Context, nc *awsv1.EC2NodeClass) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nc, Finalizer) {
		return reconcile.Result{}, nil
	}
	claims := &karpv1.NodeClaimList{}
	if err := c.Client.List(ctx, claims, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	var using []string
	for i := range claims.Items {
		ref := claims.Items[i].Spec.NodeClassRef
		if ref != nil && ref.Group == awsv1.Group && ref.Name == nc.Name {
			using = append(using, claims.Items[i].Name)
		}
	}
	if len(using) > 0 {
		if c.Recorder != nil {
			c.Recorder.Eventf(nc, nil, "Normal", "WaitingOnNodeClaimTermination", "Deleting",
				"waiting for %d NodeClaim(s) to terminate: %s", len(using), strings.Join(first(using, 5), ", "))
		}
		// The claims' deletions requeue the class (see Register); this is a safety net.
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	}
	if err := c.Provider.Cleanup(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	stored := nc.DeepCopy()
	controllerutil.RemoveFinalizer(nc, Finalizer)
	if err := c.Client.Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, nil
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}
