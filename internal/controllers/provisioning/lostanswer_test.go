package provisioning

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
)

// lostAnswers wraps the test API server's client as a provisioner sees it when the API server
// drops connections: a NodeClaim create chosen by lose gets no answer (written to the API server
// first when write is true), and the claims whose answers were lost are missing from lists, as
// from a cache whose watch has not caught up.
type lostAnswers struct {
	lose    func(n int32) bool
	write   bool
	creates atomic.Int32
	hidden  sync.Map
}

func (l *lostAnswers) client(t *testing.T) client.Client {
	t.Helper()
	return interceptor.NewClient(directClient(t), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			nc, ok := obj.(*karpv1.NodeClaim)
			if !ok || !l.lose(l.creates.Add(1)) {
				return c.Create(ctx, obj, opts...)
			}
			if l.write {
				if err := c.Create(ctx, obj, opts...); err != nil {
					return err
				}
			}
			l.hidden.Store(nc.Name, true)
			return &url.Error{Op: "Post", URL: strings.TrimSuffix(env.Config.Host, "/") + "/apis/karpenter.sh/v1/nodeclaims", Err: io.ErrUnexpectedEOF}
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if ncs, ok := list.(*karpv1.NodeClaimList); ok {
				kept := ncs.Items[:0]
				for _, nc := range ncs.Items {
					if _, hide := l.hidden.Load(nc.Name); !hide {
						kept = append(kept, nc)
					}
				}
				ncs.Items = kept
			}
			return nil
		},
	})
}

// A claim written by the API server whose answer was lost, behind a cache that has not seen it:
// the provisioner asks the API server for it by name, counts it created, and the next pass does
// not plan its pods again. (With generated names and no lookup the second pass bought a second
// machine for the same pod: 2 claims.)
func TestALostCreateAnswerDoesNotBuyTwice(t *testing.T) {
	np := pool("prov-lost", nil)
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "lost", 1, "500m", nil)
	l := &lostAnswers{lose: func(n int32) bool { return n == 1 }, write: true}
	p.Client, p.APIReader = l.client(t), env.Client

	res, first := p.Provision(t.Context())
	_, second := p.Provision(t.Context())
	if got := len(claimsOf(t, "prov-lost")); got != 1 {
		t.Fatalf("%d claims for one pending pod after a lost create answer, want 1", got)
	}
	if first != nil || second != nil {
		t.Fatalf("passes failed: %v; %v", first, second)
	}
	if len(res.Created) != 1 {
		t.Fatalf("first pass created %d claims, want the one whose answer was lost, found by name", len(res.Created))
	}
}

// A create that got no answer and was not written: the lookup finds nothing, the pass fails with
// the create's error, and the next pass creates the claim.
func TestALostCreateThatWasNotWrittenIsRetried(t *testing.T) {
	np := pool("prov-unwritten", nil)
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "unwritten", 1, "500m", nil)
	l := &lostAnswers{lose: func(n int32) bool { return n == 1 }}
	p.Client, p.APIReader = l.client(t), env.Client

	if _, err := p.Provision(t.Context()); !errors.Is(err, io.ErrUnexpectedEOF) || claimstore.IsUnresolved(err) {
		t.Fatalf("first pass: %v, want the create's unexpected EOF, settled as not written", err)
	}
	if n := len(claimsOf(t, "prov-unwritten")); n != 0 {
		t.Fatalf("%d claims after a create that was not written", n)
	}
	res, err := p.Provision(t.Context())
	if err != nil || len(res.Created) != 1 {
		t.Fatalf("second pass: %d created, %v; want the claim", len(res.Created), err)
	}
	if got := len(claimsOf(t, "prov-unwritten")); got != 1 {
		t.Fatalf("%d claims, want 1", got)
	}
}

// A lost answer while the API server cannot be asked either (it is down): after the lookups'
// back-off the pass fails saying it cannot tell, and the claim counts as possibly created, so the
// pods wait for it instead of buying another machine.
func TestAnUnresolvedCreateIsNotPlannedAgain(t *testing.T) {
	np := pool("prov-unresolved", nil)
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "unresolved", 1, "500m", nil)
	l := &lostAnswers{lose: func(n int32) bool { return n == 1 }, write: true}
	p.Client = l.client(t)
	var lookups atomic.Int32
	p.APIReader = interceptor.NewClient(directClient(t), interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			lookups.Add(1)
			return &url.Error{Op: "Get", URL: env.Config.Host, Err: syscall.ECONNREFUSED}
		}})
	clk := p.Clock.(interface {
		HasWaiters() bool
		Step(time.Duration)
		Now() time.Time
	})
	start := clk.Now()
	done := make(chan error, 1)
	go func() {
		_, err := p.Provision(t.Context())
		done <- err
	}()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(time.Millisecond):
			if clk.HasWaiters() {
				clk.Step(claimstore.ResolveBackoff.Cap)
			}
		}
	}
	if !claimstore.IsUnresolved(err) || !strings.Contains(err.Error(), "whether it exists is unknown") {
		t.Fatalf("first pass: %v, want the create unresolved", err)
	}
	if n, asked := lookups.Load(), clk.Now().Sub(start); n < 2 || asked < claimstore.ResolveFor {
		t.Errorf("%d lookups over %s, want several over %s", n, asked, claimstore.ResolveFor)
	}
	res, err := p.Provision(t.Context())
	if err != nil || len(res.Created) != 0 {
		t.Fatalf("second pass: %d created, %v; want none: the pod waits for the claim that may exist", len(res.Created), err)
	}
	if got := len(claimsOf(t, "prov-unresolved")); got != 1 {
		t.Fatalf("%d claims, want 1", got)
	}
}

// directClient is a client of the test API server without a cache.
func directClient(t *testing.T) client.WithWatch {
	t.Helper()
	ww, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return ww
}

// A create the API server wrote, answered with a storage timeout (504 with Retry-After): client-go
// sends the create again by itself and that attempt is answered AlreadyExists — the claim is this
// create's own. The provisioner counts it created and buys nothing more. (Taking AlreadyExists for
// a taken name, it created the claim again under another: two machines for one pod.) Real
// client-go through a proxy in front of the test API server that replaces the first NodeClaim
// POST's answer, after forwarding it.
func TestACreateRetriedByTheClientIsNotBoughtTwice(t *testing.T) {
	np := pool("prov-retried", nil)
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "retried", 1, "500m", nil)

	upstream, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(upstream)
	forward.Transport = transport
	var posts atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/nodeclaims") || posts.Add(1) != 1 {
			forward.ServeHTTP(w, r)
			return
		}
		// Forward the first create, so the API server writes the claim, then answer as a
		// storage timeout would.
		forward.ServeHTTP(httptest.NewRecorder(), r)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusGatewayTimeout)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Timeout","code":504,"details":{"retryAfterSeconds":1},"message":"Timeout: request did not complete within the allotted timeout"}`))
	}))
	t.Cleanup(proxy.Close)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host, cfg.TLSClientConfig = proxy.URL, rest.TLSClientConfig{}
	cfg.CertData, cfg.KeyData, cfg.CAData, cfg.BearerToken = nil, nil, nil, ""
	through, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	p.Client, p.APIReader = through, env.Client

	res, first := p.Provision(t.Context())
	if n := posts.Load(); n < 2 {
		t.Fatalf("%d NodeClaim POSTs through the proxy: client-go did not send the create again, the case is not exercised", n)
	}
	_, second := p.Provision(t.Context())
	if got := len(claimsOf(t, "prov-retried")); got != 1 {
		t.Fatalf("%d claims for one pending pod after a create retried by the client, want 1", got)
	}
	if first != nil || second != nil {
		t.Fatalf("passes failed: %v; %v", first, second)
	}
	if len(res.Created) != 1 {
		t.Fatalf("first pass created %d claims, want the one the retry found", len(res.Created))
	}
}
