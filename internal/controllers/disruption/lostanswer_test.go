package disruption

import (
	"context"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// A replacement the API server wrote but whose create answer was lost (the API server killed
// mid-request): the command looks it up by name and carries on — no rollback, no second
// replacement. (Taking the lost answer for a failure rolled the command back, deleted the
// replacement, and the next round launched another: two machines bought for one move.)
func TestAReplacementWhoseCreateAnswerWasLostIsKept(t *testing.T) {
	f := newFixture(t, "lostrepl", nil)
	f.node("lostrepl-big", "m5.2xlarge", "500m")
	ww, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl.Client = interceptor.NewClient(ww, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			if _, ok := obj.(*karpv1.NodeClaim); ok {
				return &url.Error{Op: "Post", URL: strings.TrimSuffix(env.Config.Host, "/") + "/apis/karpenter.sh/v1/nodeclaims", Err: io.ErrUnexpectedEOF}
			}
			return nil
		}})
	f.round(f.ctrl)
	repl := f.replacements()
	if len(repl) != 1 || !repl[0].DeletionTimestamp.IsZero() {
		t.Fatalf("replacements %v after a lost create answer, want the one written, not being deleted", names(repl))
	}
	if st := commandOf(t, f.claim("lostrepl-big")); st == nil || !slices.Equal(st.Replacements, []string{repl[0].Name}) {
		t.Fatalf("command %+v, want it carried on with %s", st, repl[0].Name)
	}
	if got := f.events(); slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, "DisruptionFailed") }) {
		t.Fatalf("events %v: the command was rolled back", got)
	}
	f.initialize(&repl[0])
	f.round(f.ctrl)
	if nc := f.claim("lostrepl-big"); nc != nil && nc.DeletionTimestamp.IsZero() {
		t.Fatal("the candidate was not deleted once its replacement initialized")
	}
	if got := f.replacements(); len(got) != 1 {
		t.Fatalf("%d replacements at the end, want 1", len(got))
	}
}

func names(ncs []karpv1.NodeClaim) []string {
	var out []string
	for _, nc := range ncs {
		out = append(out, nc.Name)
	}
	return out
}
