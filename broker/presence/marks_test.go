package presence

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

func TestMarksSurviveTheKeepersPutsUntilTheHandlerReturns(t *testing.T) {
	ctx := context.Background()
	s := &Store{Client: kubetest.Wrap(fake.NewClientset()), Namespace: "tether-system"}
	now := time.Now().UTC().Truncate(time.Microsecond)
	rec := Record{Handler: "h", Grace: time.Second, AbsentSince: now, User: User{Name: "system:serviceaccount:a:b", Groups: []string{"g"}}}
	get := func() Record {
		t.Helper()
		rs, err := s.List(ctx)
		if err != nil || len(rs) != 1 {
			t.Fatalf("List = %v, %v", rs, err)
		}
		return rs[0]
	}
	put := func(r Record) {
		t.Helper()
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	put(rec)
	must(s.MarkOrphaned(ctx, "h", "gone"))
	must(s.RequestRelease(ctx, "h", now))
	must(s.MarkNotRestored(ctx, "h", "denied"))
	put(rec)
	if m := get().Marks; m.Orphaned != "gone" || !m.ReleaseRequested.Equal(now) || !m.Released.IsZero() || m.NotRestored != "denied" {
		t.Fatalf("after a Put: marks %+v, want orphaned, not restored and the request kept", m)
	}
	if u := get().User; u.Name != rec.User.Name || len(u.Groups) != 1 {
		t.Fatalf("user %+v, want %+v", u, rec.User)
	}
	must(s.MarkReleasing(ctx, "h", now))
	if m := get().Marks; !m.Releasing.Equal(now) || !m.ReleaseRequested.Equal(now) {
		t.Fatalf("after MarkReleasing: marks %+v, want releasing and the request", m)
	}
	must(s.MarkReleased(ctx, "h", now))
	if m := get().Marks; m.Orphaned != "" || !m.ReleaseRequested.IsZero() || !m.Releasing.IsZero() || !m.Released.Equal(now) {
		t.Fatalf("after MarkReleased: marks %+v, want only released", m)
	}
	rec.Instances, rec.AbsentSince = 1, time.Time{}
	put(rec)
	if m := get().Marks; !m.Released.IsZero() || m.NotRestored != "" {
		t.Fatalf("the handler returned: marks %+v, want released and not restored cleared", m)
	}
	must(s.Delete(ctx, "h"))
	must(s.Delete(ctx, "h"))
	if rs, err := s.List(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("after Delete: %v, %v", rs, err)
	}
}
