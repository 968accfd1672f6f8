package cloudprovider_test

import (
	"context"
	"errors"
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// hanging answers nothing until its caller gives up, except Get, which says the machine is gone
// only once the caller's context has ended (a not-found must stay a not-found).
type hanging struct{ cloudprovider.CloudProvider }

func (hanging) Create(ctx context.Context, _ *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hanging) Delete(ctx context.Context, _ *karpv1.NodeClaim) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hanging) Get(ctx context.Context, _ string) (*karpv1.NodeClaim, error) {
	<-ctx.Done()
	return nil, &cloudprovider.NodeClaimNotFoundError{Err: errors.New("gone")}
}

// A call that hangs returns a TimeoutError naming the call and its deadline once the deadline
// passes; the provider's own error kinds pass through; the caller's own cancellation is not a
// timeout.
func TestCallsHaveDeadlines(t *testing.T) {
	cp := cloudprovider.WithDeadlines(hanging{}, cloudprovider.Deadlines{Create: 20 * time.Millisecond, Delete: 20 * time.Millisecond, Get: 20 * time.Millisecond})
	_, err := cp.Create(context.Background(), &karpv1.NodeClaim{})
	var te *cloudprovider.TimeoutError
	if !errors.As(err, &te) || te.Call != "Create" || te.After != 20*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create: %v, want a TimeoutError of Create after 20ms", err)
	}
	if want := "the cloud provider's Create did not answer within 20ms: context deadline exceeded"; err.Error() != want {
		t.Errorf("Create: %q, want %q", err, want)
	}
	if err := cp.Delete(context.Background(), &karpv1.NodeClaim{}); !errors.As(err, &te) || te.Call != "Delete" {
		t.Errorf("Delete: %v, want a TimeoutError of Delete", err)
	}
	if _, err := cp.Get(context.Background(), "sim:///x"); !cloudprovider.IsNodeClaimNotFound(err) || errors.As(err, &te) {
		t.Errorf("Get: %v, want the provider's not-found, not a timeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cp.Create(ctx, &karpv1.NodeClaim{}); errors.As(err, &te) || !errors.Is(err, context.Canceled) {
		t.Errorf("Create with the caller's context canceled: %v, want the cancellation", err)
	}
}
