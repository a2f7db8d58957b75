package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// TestATenureLastsTheRenewDeadlineFromTheWriteSent: the tenure holds from a
// write that succeeded until the renew deadline has passed since it was
// sent, and not before the first or after the release.
func TestATenureLastsTheRenewDeadlineFromTheWriteSent(t *testing.T) {
	start := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		renewed bool // a write sent at start succeeded
		ended   bool
		after   time.Duration // from start
		held    bool
	}{
		{name: "no write yet", after: 0},
		{name: "just renewed", renewed: true, after: 0, held: true},
		{name: "within the deadline", renewed: true, after: 1999 * time.Millisecond, held: true},
		{name: "at the deadline", renewed: true, after: 2 * time.Second},
		{name: "frozen well past it", renewed: true, after: 6 * time.Second},
		{name: "released", renewed: true, ended: true, after: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			te := &tenure{clock: clk, length: 2 * time.Second, log: hclog.NewNullLogger()}
			if tc.renewed {
				te.renewed(start)
			}
			if tc.ended {
				te.end()
			}
			clk.SetTime(start.Add(tc.after))
			err := te.check()
			if held := err == nil; held != tc.held {
				t.Fatalf("check() = %v; want held %v", err, tc.held)
			}
			if err != nil && !errors.Is(err, errTenureLapsed) {
				t.Errorf("check() = %v, want errTenureLapsed", err)
			}
		})
	}
}

// TestTheElectorRenewsTheTenureFromWhenItsWriteWasSent: a leader's
// tenure runs from each write of the Lease that succeeded; a clock that
// jumped past the renew deadline (a frozen process waking) finds it
// lapsed before any renewal runs, and one that fails (another replica
// took the Lease) leaves it lapsed.
func TestTheElectorRenewsTheTenureFromWhenItsWriteWasSent(t *testing.T) {
	leases := kubetest.Wrap(fake.NewClientset()).CoordinationV1().Leases("tether-system")
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	newElector := func(id string, te *tenure) *elector {
		return &elector{
			lock:          &markedLeaseLock{leases: leases, namespace: "tether-system", name: DefaultLeaseName, identity: id},
			tenure:        te,
			leaseDuration: 3 * time.Second, renewDeadline: 2 * time.Second, retryPeriod: 250 * time.Millisecond,
			clock: clk, log: hclog.NewNullLogger(),
		}
	}
	te := &tenure{clock: clk, length: 2 * time.Second, log: hclog.NewNullLogger()}
	a := newElector("a", te)
	ctx := context.Background()
	if err := te.check(); err == nil {
		t.Fatal("a tenure before any write")
	}
	if !a.tryAcquireOrRenew(ctx) {
		t.Fatal("a did not take the free Lease")
	}
	if err := te.check(); err != nil {
		t.Fatalf("just after taking the Lease: %v", err)
	}
	clk.Step(time.Second)
	if !a.tryAcquireOrRenew(ctx) {
		t.Fatal("a did not renew")
	}
	clk.Step(1500 * time.Millisecond)
	if err := te.check(); err != nil {
		t.Errorf("1.5 s after a renewal, within the 2 s deadline: %v", err)
	}
	b := newElector("b", nil)
	if b.tryAcquireOrRenew(ctx) {
		t.Fatal("b took the Lease a holds")
	}
	// a frozen: the clock jumps past the Lease's expiry, and b takes it.
	clk.Step(5 * time.Second)
	if err := te.check(); !errors.Is(err, errTenureLapsed) {
		t.Errorf("after a freeze past the Lease: %v, want errTenureLapsed", err)
	}
	if !b.tryAcquireOrRenew(ctx) {
		t.Fatal("b did not take the expired Lease")
	}
	if a.tryAcquireOrRenew(ctx) {
		t.Fatal("a renewed a Lease b holds")
	}
	if err := te.check(); !errors.Is(err, errTenureLapsed) {
		t.Errorf("after a failed renewal: %v, want errTenureLapsed", err)
	}
}
