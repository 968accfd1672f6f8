package aws_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// gatedEC2 holds DescribeInstanceTypes until the gate opens, once armed.
type gatedEC2 struct {
	aws.EC2API
	armed   chan struct{}
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedEC2) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	select {
	case <-g.armed:
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-g.gate
	default:
	}
	return g.EC2API.DescribeInstanceTypes(ctx, in, opts...)
}

// While one refresh of the instance types runs (a slow, paginated describe), other callers get
// the copy there is at once instead of queueing behind it.
func TestCallersGetTheCopyWhileARefreshRuns(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	g := &gatedEC2{EC2API: f.Clients.EC2, armed: make(chan struct{}), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	clients := *f.Clients
	clients.EC2 = g
	p := f.NewProvider(t, &clients)
	nc, _ := f.Orders(t)
	nc = resolved(t, f, nc)
	first, err := p.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	// The types are due again; the next refresh is slow.
	f.Clock.Step(time.Hour)
	close(g.armed)
	slow := make(chan error, 1)
	go func() {
		_, err := p.InstanceTypes(ctx, nc)
		slow <- err
	}()
	<-g.entered
	done := make(chan error, 1)
	go func() {
		its, err := p.InstanceTypes(ctx, nc)
		if err == nil && len(its) != len(first) {
			t.Errorf("%d types served during the refresh, want the copy's %d", len(its), len(first))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a caller waited behind the refresh")
	}
	close(g.gate)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// A failed describe with a copy keeps the copy and is not tried again by every caller: the next
// try waits out a back-off of 30 s.
func TestFailedDescribesBackOff(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, _ := f.Orders(t)
	nc = resolved(t, f, nc)
	if _, err := f.Provider.InstanceTypes(ctx, nc); err != nil {
		t.Fatal(err)
	}
	f.Clock.Step(time.Hour)
	f.AWS.InjectFault("DescribeInstanceTypes", 1000, awsfake.Fault{Code: "UnauthorizedOperation", Message: "throttled by policy", Status: 403})
	before := f.AWS.Calls("DescribeInstanceTypes")
	for range 5 {
		if its, err := f.Provider.InstanceTypes(ctx, nc); err != nil || len(its) == 0 {
			t.Fatalf("the copy was not served: %d types, %v", len(its), err)
		}
	}
	tried := f.AWS.Calls("DescribeInstanceTypes") - before
	if tried == 0 {
		t.Fatal("the due refresh was not tried")
	}
	f.Clock.Step(29 * time.Second)
	if _, err := f.Provider.InstanceTypes(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if again := f.AWS.Calls("DescribeInstanceTypes") - before; again != tried {
		t.Fatalf("describes within the back-off: %d calls after the first failure's %d", again, tried)
	}
	f.Clock.Step(time.Second)
	if _, err := f.Provider.InstanceTypes(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if again := f.AWS.Calls("DescribeInstanceTypes") - before; again == tried {
		t.Fatal("no describe after the back-off")
	}
}
