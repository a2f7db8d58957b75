package presence

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// The stuck holds go through the Lease and back, and go from it when none
// is stuck any more.
func TestStuckHoldsRoundTripThroughTheLease(t *testing.T) {
	ctx := context.Background()
	s := &Store{Client: kubetest.Wrap(fake.NewClientset()), Namespace: "tether-system"}
	since := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	want := Stuck{Total: 3, Objects: []StuckObject{{Resource: "widgets.test.tether.dev", Namespace: "ns", Name: "w", Since: since,
		Binding: "d", Reason: "retrying", Why: "handler present and retrying (binding d, attempt 2, last message: no)"}}}
	if err := s.Put(ctx, Record{Handler: "h", Stuck: want}); err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx)
	if err != nil || len(got) != 1 || got[0].Unreadable != nil {
		t.Fatalf("List = %+v, %v", got, err)
	}
	if !got[0].Stuck.Equal(want) || got[0].Stuck.Objects[0].Reason != "retrying" {
		t.Errorf("stuck = %+v, want %+v", got[0].Stuck, want)
	}
	if err := s.Put(ctx, Record{Handler: "h"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.List(ctx); got[0].Stuck.Total != 0 || got[0].Stuck.Objects != nil {
		t.Errorf("stuck after none is: %+v", got[0].Stuck)
	}
}
