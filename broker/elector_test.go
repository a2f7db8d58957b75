package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// TestElectorLeadsAloneAndHandsOverOnRelease: of two electors on one
// Lease, one leads and the other follows, knowing the leader; when the
// leader's context ends it stops leading and releases the Lease (no
// holder, the transitions kept), and the follower takes it on its next
// try, long before the Lease would have expired.
func TestElectorLeadsAloneAndHandsOverOnRelease(t *testing.T) {
	leases := kubetest.Wrap(fake.NewClientset()).CoordinationV1().Leases("tether-system")
	var mu sync.Mutex
	leading, leaders := map[string]bool{}, map[string]string{}
	newElector := func(id string) *elector {
		return &elector{
			lock:          &markedLeaseLock{leases: leases, namespace: "tether-system", name: DefaultLeaseName, identity: id},
			leaseDuration: time.Minute, renewDeadline: 2 * time.Second, retryPeriod: 50 * time.Millisecond,
			clock: clock.RealClock{}, log: hclog.NewNullLogger(),
			onStarted: func(ctx context.Context) {
				mu.Lock()
				leading[id] = true
				mu.Unlock()
				<-ctx.Done()
			},
			onStopped: func() {
				mu.Lock()
				leading[id] = false
				mu.Unlock()
			},
			onNewLeader: func(leader string) {
				mu.Lock()
				leaders[id] = leader
				mu.Unlock()
			},
		}
	}
	state := func() (a, b bool, bSees string) {
		mu.Lock()
		defer mu.Unlock()
		return leading["a"], leading["b"], leaders["b"]
	}
	actx, stopA := context.WithCancel(t.Context())
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		newElector("a").run(actx)
	}()
	waitFor(t, "a leading", func() bool { a, _, _ := state(); return a })
	bctx, stopB := context.WithCancel(t.Context())
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		newElector("b").run(bctx)
	}()
	defer func() {
		stopB()
		<-bDone
	}()
	waitFor(t, "b following a", func() bool { _, _, sees := state(); return sees == "a" })
	if _, b, _ := state(); b {
		t.Fatal("b leads while a holds the Lease")
	}

	stopA()
	<-aDone
	if a, _, _ := state(); a {
		t.Error("a still leading after its context ended")
	}
	waitFor(t, "b leading after a released the Lease", func() bool { _, b, _ := state(); return b })
	l, err := leases.Get(t.Context(), DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holderOf(l) != "b" || transitionsOf(l) != 1 {
		t.Errorf("the Lease after the hand-over: holder %q, transitions %d; want b, 1", holderOf(l), transitionsOf(l))
	}
}

// TestLeaderElectionRefusesTimingsThatCannotHoldTheLease: the checks
// client-go's elector made of its timings.
func TestLeaderElectionRefusesTimingsThatCannotHoldTheLease(t *testing.T) {
	for _, l := range []LeaderElection{
		{LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second},
		{LeaseDuration: 15 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second},
		{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second},
	} {
		if err := l.validate(); err == nil {
			t.Errorf("%+v: accepted", l)
		}
	}
	if err := (LeaderElection{}).withDefaults().validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
