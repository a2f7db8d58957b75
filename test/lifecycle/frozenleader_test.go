package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// TestAFrozenLeaderSendsNothingOnceItsTenureMayHaveEnded: a leader frozen
// (SIGSTOP) for longer than its Lease wakes with timer ticks due. Meanwhile
// the follower has taken over, delivered the deletes and released the
// objects. The old leader must send none of those ticks: from its own clock
// it can tell that the Lease may be another's, before its elector has read
// the Lease again.
func TestAFrozenLeaderSendsNothingOnceItsTenureMayHaveEnded(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	rs := startReplicas(t, cp)

	// seen records when each kind of delivery of each object arrived.
	var mu sync.Mutex
	seen := map[string][]time.Time{}
	record := func(kind string) sdk.Func {
		return func(_ context.Context, ev *sdk.Event) error {
			mu.Lock()
			defer mu.Unlock()
			seen[kind+" "+ev.Name] = append(seen[kind+" "+ev.Name], time.Now())
			return nil
		}
	}
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen[key])
	}
	// A validate binding keeps a stream from the handler to every replica,
	// the frozen one's included, as in a cluster.
	h := sdk.New("frozen", append(handlerOpts(t), sdk.WithDialer(sdk.RoundRobin(rs.Addrs...)))...)
	h.OnValidate(widgets, func(context.Context, *sdk.Review) error { return nil }, sdk.Namespaces(ns), sdk.Failure(sdk.FailOpen))
	h.OnTimer(widgets, 100*time.Millisecond, record("tick"), sdk.Namespaces(ns))
	h.OnDelete(widgets, record("delete"), sdk.Namespaces(ns))
	runHandler(t, h, rs.Addrs[0])

	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("w-%02d", i))
	}
	createHeld(t, cp, ns, "frozen", names...)
	for _, n := range names {
		eventually(t, "a tick of "+n, func() bool { return count("tick "+n) > 0 })
	}

	leader := rs.leaderLease(t)
	holder := func() string {
		h, _ := testenv.LeaseHolder(context.Background(), cp.Client(), rs.namespace)
		return h
	}
	frozen := rs.brokers[leader]
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the follower leads", func() bool { h := holder(); return h != "" && h != leader })
	for _, n := range names {
		del(t, dyn, widgetGVR, ns, n)
	}
	for _, n := range names {
		waitObject(t, dyn, widgetGVR, ns, n, "gone", gone)
	}
	// Every delete was delivered by the new leader, after its last tick of
	// the object on the same stream: a tick that comes after this moment
	// was sent by the old leader.
	woken := time.Now()
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	awaitExitOnLostLease(t, frozen)
	mu.Lock()
	defer mu.Unlock()
	for _, n := range names {
		for _, at := range seen["tick "+n] {
			if !at.Before(woken) {
				t.Errorf("%s was ticked %v after the old leader (%s) woke, when the new leader had released it",
					n, at.Sub(woken).Round(time.Millisecond), leader)
			}
		}
		if len(seen["delete "+n]) == 0 {
			t.Errorf("%s was released with no delete delivered", n)
		}
	}
}
