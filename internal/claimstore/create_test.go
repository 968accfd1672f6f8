package claimstore

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestAmbiguous(t *testing.T) {
	gr := schema.GroupResource{Group: "karpenter.sh", Resource: "nodeclaims"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"dropped connection", &url.Error{Op: "Post", URL: "https://x", Err: io.ErrUnexpectedEOF}, true},
		{"connection reset", &url.Error{Op: "Post", URL: "https://x", Err: syscall.ECONNRESET}, true},
		{"client timeout", &url.Error{Op: "Post", URL: "https://x", Err: context.DeadlineExceeded}, true},
		{"server timeout", apierrors.NewServerTimeout(gr, "create", 1), true},
		{"request timeout", apierrors.NewTimeoutError("etcd", 1), true},
		{"internal error", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), true},
		{"service unavailable", apierrors.NewServiceUnavailable("restarting"), true},
		{"connection refused", &url.Error{Op: "Post", URL: "https://x", Err: syscall.ECONNREFUSED}, false},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Group: "karpenter.sh", Kind: "NodeClaim"}, "x", nil), false},
		{"forbidden", apierrors.NewForbidden(gr, "x", errors.New("quota")), false},
		{"already exists", apierrors.NewAlreadyExists(gr, "x"), false},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), false},
		{"none", nil, false},
	} {
		if got := Ambiguous(tc.err); got != tc.want {
			t.Errorf("%s: Ambiguous(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestNewName(t *testing.T) {
	long := strings.Repeat("p", 80)
	for pool, prefix := range map[string]string{"default": "default-", long: long[:57] + "-"} {
		n := NewName(pool)
		if !strings.HasPrefix(n, prefix) || len(n) != len(prefix)+5 || len(n) > 63 {
			t.Errorf("NewName(%q) = %q, want %q and five characters, at most 63 in all", pool, n, prefix)
		}
	}
}

// A disruption's replacement is named after its pool, command and index, cut to what a node's
// hostname label holds: a pool of 63 characters (the most its nodepool label holds) gave a
// 74-character name, which as its simulated node's hostname label value the API server refuses.
func TestNameForFitsAHostnameLabel(t *testing.T) {
	pool := strings.Repeat("p", 63)
	for suffix, want := range map[string]string{"abcdefgh-0": pool[:52] + "-abcdefgh-0", "x": pool[:61] + "-x"} {
		if got := NameFor(pool, suffix); got != want || len(got) > MaxName {
			t.Errorf("NameFor(%d characters, %q) = %q, want %q", len(pool), suffix, got, want)
		}
	}
	if got := NameFor("default", "abcdefgh-1"); got != "default-abcdefgh-1" {
		t.Errorf("NameFor(default, abcdefgh-1) = %q", got)
	}
}
