package ownwrites

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

func obj(uid, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: k8stypes.UID("uid-" + uid), ResourceVersion: rv}}
}

func TestReadOfAReplacedVersionIsStale(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := New(clk)
	// Read at 10; metadata patch gave 11, status patch gave 12.
	tr.Wrote(obj("a", "12"), "10", "11")
	for _, rv := range []string{"10", "11"} {
		if !tr.Stale(obj("a", rv)) {
			t.Fatalf("version %s, replaced by the caller's own write, is not stale", rv)
		}
	}
	if tr.Stale(obj("b", "10")) {
		t.Fatal("another object with the same version is stale")
	}
	if tr.Stale(obj("a", "12")) {
		t.Fatal("the version the caller wrote is stale")
	}
	// Caught up: the record is gone, so an old version seen again (a relist) is not second-guessed.
	if tr.Stale(obj("a", "10")) || tr.Len() != 0 {
		t.Fatal("the record outlived the read that showed the cache caught up")
	}
}

func TestSomeoneElsesLaterWriteEndsTheRecord(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := New(clk)
	tr.Wrote(obj("a", "12"), "10")
	if tr.Stale(obj("a", "13")) {
		t.Fatal("a version newer than the caller's write is stale")
	}
	if tr.Len() != 0 {
		t.Fatal("record kept after a newer version was read")
	}
}

func TestRecordsExpire(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := New(clk)
	tr.Wrote(obj("a", "12"), "10")
	clk.Step(TTL + time.Second)
	if tr.Stale(obj("a", "10")) {
		t.Fatal("a write older than the TTL still makes reads stale")
	}
	// Expired versions are not carried into the next write's record.
	tr.Wrote(obj("a", "20"), "19")
	tr.Wrote(obj("a", "21"), "20")
	clk.Step(TTL + time.Second)
	tr.Wrote(obj("a", "31"), "30")
	if tr.Stale(obj("a", "19")) {
		t.Fatal("a version from an expired record is stale")
	}
}

func TestWritesAccumulateUntilSeen(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := New(clk)
	tr.Wrote(obj("a", "11"), "10")
	tr.Wrote(obj("a", "12"), "11")
	for _, rv := range []string{"10", "11"} {
		if !tr.Stale(obj("a", rv)) {
			t.Fatalf("version %s replaced by one of two writes is not stale", rv)
		}
	}
	tr.Forget("uid-a")
	if tr.Len() != 0 {
		t.Fatal("Forget kept the record")
	}
}

// A write the server found to change nothing keeps the object's version: that version is current,
// not replaced, and reads of it are not stale.
func TestWriteThatChangedNothingIsNotRecorded(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := New(clk)
	tr.Wrote(obj("a", "10"), "10")
	if tr.Stale(obj("a", "10")) || tr.Len() != 0 {
		t.Fatal("a write that kept the version made its reads stale")
	}
}

// Objects deleted before any read showed the cache caught up are dropped once expired, by a
// later write of any object.
func TestExpiredRecordsAreSwept(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := New(clk)
	for _, uid := range []string{"a", "b", "c"} {
		tr.Wrote(obj(uid, "2"), "1")
	}
	clk.Step(TTL + time.Second)
	tr.Wrote(obj("d", "2"), "1")
	if n := tr.Len(); n != 1 {
		t.Fatalf("%d records after the sweep, want only the fresh one", n)
	}
}
