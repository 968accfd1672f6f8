package claimstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// NewName is a fresh name for a NodeClaim of the pool, of the form the API server's generateName
// gives ("<pool>-" and five random characters). Capstan names its claims itself rather than
// through generateName so that a create whose answer was lost can be looked up by name.
func NewName(pool string) string {
	return NameFor(pool, utilrand.String(5))
}

// MaxName is the longest NodeClaim name Capstan makes: a node is often named after its claim
// (the simulated cloud's are), and its kubernetes.io/hostname label value may not be longer.
const MaxName = 63

// NameFor is the pool's name, cut as generateName cuts a base, then "-" and suffix: at most
// MaxName characters (suffix shorter than MaxName).
func NameFor(pool, suffix string) string {
	if base := MaxName - len(suffix) - 1; len(pool) > base {
		pool = pool[:max(base, 0)]
	}
	return pool + "-" + suffix
}

// ResolveBackoff is how often Create asks the API server whether a claim whose create answer was
// lost exists: from half a second apart, doubling, then every 10 s; ResolveFor is how long it
// asks (the time a restarted API server takes to serve again, with room).
var ResolveBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6, Cap: 10 * time.Second}

// ResolveFor bounds the asking (see ResolveBackoff).
const ResolveFor = time.Minute

// UnresolvedError says a NodeClaim's create got no answer and the API server could not be asked
// afterwards whether it exists: the claim may exist. A caller must treat the claim as possibly
// created (not plan its pods again at once) and not as launched.
type UnresolvedError struct {
	Name string
	// Err is the create's error; Last the last lookup's.
	Err, Last error
}

func (e *UnresolvedError) Error() string {
	return fmt.Sprintf("creating nodeclaim %s: no answer (%v), and whether it exists is unknown (%v)", e.Name, e.Err, e.Last)
}

func (e *UnresolvedError) Unwrap() error { return e.Err }

// IsUnresolved reports whether err is (or wraps) an UnresolvedError.
func IsUnresolved(err error) bool {
	var u *UnresolvedError
	return errors.As(err, &u)
}

// Create creates nc, which must carry its name (NewName), and settles what a lost answer leaves
// open. When the create fails in a way that does not say whether the API server wrote the object
// (a dropped connection, a timeout, an internal error: the API server or etcd may have committed
// it before the answer was lost), Create reads the claim by name from reader, which must not be a
// cache (a cache lagging behind the API server would say NotFound for a claim that exists), with
// ResolveBackoff: found, the create succeeded and Create returns nil with nc updated; not found,
// the create's error is returned; no answer, an *UnresolvedError.
//
// Without this a burst planned while the API server restarts buys twice: the claim was written,
// its answer lost, the cache had not seen it, and the next pass planned its pods again.
func Create(ctx context.Context, c client.Client, reader client.Reader, clk clock.Clock, nc *karpv1.NodeClaim) error {
	if nc.Name == "" {
		return fmt.Errorf("creating a nodeclaim of NodePool %q: no name (use claimstore.NewName)", nc.Labels[karpv1.NodePoolLabelKey])
	}
	err := c.Create(ctx, nc)
	if apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
		return ownedAlready(ctx, reader, nc, err)
	}
	if err == nil || !Ambiguous(err) || ctx.Err() != nil {
		return err
	}
	logger := log.FromContext(ctx).WithValues("NodeClaim", nc.Name)
	logger.Info("nodeclaim create got no answer; asking the API server whether it exists", "error", err.Error())
	b, start := ResolveBackoff, clk.Now()
	var last error
	for {
		var mine bool
		mine, last = readBack(ctx, reader, nc)
		switch {
		case last == nil && !mine:
			// Another writer's claim of the same name: this create was refused.
			return apierrors.NewAlreadyExists(schema.GroupResource{Group: karpv1.SchemeGroupVersion.Group, Resource: "nodeclaims"}, nc.Name)
		case last == nil:
			logger.Info("nodeclaim create whose answer was lost had succeeded")
			return nil
		case apierrors.IsNotFound(last):
			logger.Info("nodeclaim create whose answer was lost had not been written")
			return err
		}
		if clk.Since(start) >= ResolveFor {
			return &UnresolvedError{Name: nc.Name, Err: err, Last: last}
		}
		select {
		case <-ctx.Done():
			return &UnresolvedError{Name: nc.Name, Err: err, Last: ctx.Err()}
		case <-clk.After(b.Step()):
		}
	}
}

// ownedAlready settles a create answered AlreadyExists (exists). The name is this claim's own
// and random, so the claim found is most likely this create's own earlier attempt: client-go
// sends a create again, unasked, when the API server answers 429 or 5xx with Retry-After — and a
// storage timeout (504, Retry-After) may come after etcd committed the write. Read by name:
// the same origin, the create succeeded (nc updated, nil); another claim, exists is returned;
// no answer, an *UnresolvedError (the claim may be this one). Taking every AlreadyExists for a
// taken name made the provisioner create the claim again under another name: two machines.
func ownedAlready(ctx context.Context, reader client.Reader, nc *karpv1.NodeClaim, exists error) error {
	mine, err := readBack(ctx, reader, nc)
	switch {
	case apierrors.IsNotFound(err):
		// Deleted since: whoever's it was, this create did not make a claim that lives.
		return exists
	case err != nil:
		return &UnresolvedError{Name: nc.Name, Err: exists, Last: err}
	case !mine:
		return exists
	}
	log.FromContext(ctx).Info("nodeclaim create answered exists: its own earlier attempt had been written", "NodeClaim", nc.Name)
	return nil
}

// readBack reads the claim named nc.Name from reader: mine when it is the claim nc asked for
// (sameOrigin), nc then updated to it; err is the read's.
func readBack(ctx context.Context, reader client.Reader, nc *karpv1.NodeClaim) (mine bool, err error) {
	got := &karpv1.NodeClaim{}
	if err := reader.Get(ctx, client.ObjectKey{Name: nc.Name}, got); err != nil {
		return false, err
	}
	if !sameOrigin(got, nc) {
		return false, nil
	}
	got.DeepCopyInto(nc)
	return true, nil
}

// sameOrigin reports whether got, read back after a lost answer, is the claim nc asked for: it
// carries every label and annotation nc was sent with. (A claim of the same random name from
// another writer would not carry this one's launched-for text.)
func sameOrigin(got, nc *karpv1.NodeClaim) bool {
	for k, v := range nc.Labels {
		if got.Labels[k] != v {
			return false
		}
	}
	for k, v := range nc.Annotations {
		if got.Annotations[k] != v {
			return false
		}
	}
	return true
}

// Ambiguous reports whether a create's error leaves open whether the object was written: any
// failure other than an answer from the API server that refused it, and the API server's own
// timeouts and internal errors (a write to etcd may commit after the answer is lost). A refused
// connection is not ambiguous: nothing was sent.
func Ambiguous(err error) bool {
	if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	s := status.Status()
	switch s.Reason {
	case metav1.StatusReasonTimeout, metav1.StatusReasonServerTimeout, metav1.StatusReasonInternalError:
		return true
	}
	switch s.Code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
