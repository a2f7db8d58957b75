package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestBrokerFailover runs two broker replicas with leader election and
// SIGKILLs the leader under load: the follower takes over within the lease
// duration, the handler reconnects by itself, every object created before
// and after is handled, and no hold is released.
func TestBrokerFailover(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	election := []string{"--leader-elect", "--leader-elect-lease-duration", "3s",
		"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms"}
	addrs := []string{freeAddr(t), freeAddr(t)}
	brokers := map[string]*brokerProcess{}
	for i, id := range []string{"replica-a", "replica-b"} {
		brokers[id] = startBrokerProcess(t, cp, addrs[i], brokerNS, append([]string{"--identity", id}, election...)...)
	}

	var j journal
	h := sdk.New("failover", append(handlerOpts(t), sdk.WithDialer(sdk.RoundRobin(addrs...)))...)
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
	h.OnDelete(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addrs[0]) // the dialer picks the replica

	names := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%02d", prefix, i))
		}
		return out
	}
	createHeld(t, cp, ns, "failover", names("before", 20)...)

	lease, err := cp.Client().CoordinationV1().Leases(brokerNS).Get(context.Background(), "tether-broker-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leader := *lease.Spec.HolderIdentity
	brokers[leader].kill()
	killed := time.Now()
	for _, n := range names("after", 20) {
		create(t, dyn, widgetGVR, widget(ns, n, map[string]any{"size": int64(1)}))
	}
	j.waitCount(t, sdk.Create, "after-00", 1)
	t.Logf("the follower took over and handled a new object %v after the leader (%s) was killed (lease duration 3s)",
		time.Since(killed).Round(time.Millisecond), leader)
	createdAfter := names("after", 20)
	for _, n := range createdAfter {
		waitObject(t, dyn, widgetGVR, ns, n, "held", heldBy("failover"))
	}
	for _, n := range append(names("before", 20), createdAfter...) {
		if len(j.find(sdk.Create, n)) == 0 {
			t.Errorf("%s was never create-handled", n)
		}
		if obj := get(t, dyn, widgetGVR, ns, n); !hold.Has(obj, "failover") {
			t.Errorf("%s lost its hold during the failover", n)
		}
	}
	for _, e := range events(t, cp, ns, "") {
		if e.Reason == "HoldReleased" {
			t.Errorf("a hold was released during the failover: %s %s", e.InvolvedObject.Name, e.Message)
		}
	}
}

// TestFollowerKeepsItsCachesWarm: a follower watches what the handlers
// recorded in their Leases need, so that when the leader is killed it takes
// over without listing the objects again (tether_informer_lists_total),
// and handles a new object once it leads. With --leader-elect-cold-standby
// it lists them at the takeover, which shows the count sees a list.
func TestFollowerKeepsItsCachesWarm(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		lists bool // the takeover lists the widgets
	}{
		{"warm", nil, false},
		{"cold standby", []string{"--leader-elect-cold-standby"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := controlplane.Get(t)
			dyn := cp.EnsureWidgetCRD(t)
			ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
			election := append([]string{"--leader-elect", "--leader-elect-lease-duration", "3s",
				"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms"}, tc.extra...)
			addrs, metricsAt := []string{freeAddr(t), freeAddr(t)}, map[string]string{}
			brokers := map[string]*brokerProcess{}
			for i, id := range []string{"replica-a", "replica-b"} {
				metricsAt[id] = freeAddr(t)
				brokers[id] = startBrokerProcess(t, cp, addrs[i], brokerNS,
					append([]string{"--identity", id, "--metrics-listen", metricsAt[id]}, election...)...)
			}
			var j journal
			h := sdk.New("warm", append(handlerOpts(t), sdk.WithDialer(sdk.RoundRobin(addrs...)))...)
			h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
			h.OnDelete(widgets, j.record(nil), sdk.Namespaces(ns))
			runHandler(t, h, addrs[0])
			createHeld(t, cp, ns, "warm", "before-0", "before-1")

			lease, err := cp.Client().CoordinationV1().Leases(brokerNS).Get(context.Background(), "tether-broker-leader", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			leader := *lease.Spec.HolderIdentity
			var follower *brokerProcess
			var lists func() float64
			for id, b := range brokers {
				if id != leader {
					follower = b
					lists = func() float64 {
						n, _ := sumOf(metricFamilies(t, "http://"+metricsAt[id]+"/metrics"), "tether_informer_lists_total",
							map[string]string{"resource": "widgets.test.tether.dev"})
						return n
					}
				}
			}
			settled := "caches warm for a takeover"
			if tc.lists {
				settled = "following:"
			}
			eventually(t, "the follower settled ("+settled+")", func() bool {
				return follower.out.Any(func(l string) bool { return strings.Contains(l, settled) })
			})
			before := lists()
			brokers[leader].kill()
			create(t, dyn, widgetGVR, widget(ns, "after", map[string]any{"size": int64(1)}))
			j.waitCount(t, sdk.Create, "after", 1)
			eventually(t, "the follower ready", func() bool {
				return follower.out.Any(func(l string) bool { return strings.Contains(l, "broker ready:") })
			})
			if n := lists() - before; (n > 0) != tc.lists {
				t.Errorf("the takeover listed the widgets %.0f times; want a list: %v", n, tc.lists)
			}
			for _, n := range []string{"before-0", "before-1"} {
				if len(j.find(sdk.Create, n)) != 1 {
					t.Errorf("%s was create-handled %d times, want once", n, len(j.find(sdk.Create, n)))
				}
			}
		})
	}
}

// TestSIGKILLedLeaderIsTakenOverEarly: with the default lease (15 s), a
// SIGKILLed leader's process is seen gone (its liveness address refuses
// connections), so the follower takes over without waiting for the Lease
// to expire: the first delivery of a new object comes well within the
// lease, and no hold is released.
func TestSIGKILLedLeaderIsTakenOverEarly(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addrs := []string{freeAddr(t), freeAddr(t)}
	brokers := map[string]*brokerProcess{}
	for i, id := range []string{"replica-a", "replica-b"} {
		brokers[id] = startBrokerProcess(t, cp, addrs[i], brokerNS, "--identity", id, "--leader-elect")
	}
	var j journal
	h := sdk.New("early", append(handlerOpts(t), sdk.WithDialer(sdk.RoundRobin(addrs...)))...)
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
	h.OnDelete(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addrs[0])
	createHeld(t, cp, ns, "early", "before-0", "before-1")

	lease, err := cp.Client().CoordinationV1().Leases(brokerNS).Get(context.Background(), "tether-broker-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leader := *lease.Spec.HolderIdentity
	for id, b := range brokers {
		if id != leader {
			eventually(t, "the follower's caches warm", func() bool {
				return b.out.Any(func(l string) bool { return strings.Contains(l, "caches warm for a takeover") })
			})
			// The follower trusts a refusal only from an address it saw answer.
			eventually(t, "the follower reached the leader's liveness address", func() bool {
				return b.out.Any(func(l string) bool { return strings.Contains(l, "the leader's liveness address answers") })
			})
		}
	}
	brokers[leader].kill()
	killed := time.Now()
	create(t, dyn, widgetGVR, widget(ns, "after", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Create, "after", 1)
	took := time.Since(killed)
	t.Logf("the first delivery came %v after the leader (%s) was SIGKILLed (lease duration 15s)", took.Round(time.Millisecond), leader)
	if limit := 8 * time.Second; took > limit {
		t.Errorf("the first delivery after the leader's SIGKILL took %v, more than %v: the follower waited for the Lease", took.Round(time.Millisecond), limit)
	}
	waitObject(t, dyn, widgetGVR, ns, "after", "held", heldBy("early"))
	for _, n := range []string{"before-0", "before-1", "after"} {
		if obj := get(t, dyn, widgetGVR, ns, n); !hold.Has(obj, "early") {
			t.Errorf("%s lost its hold in the takeover", n)
		}
	}
	for _, e := range events(t, cp, ns, "") {
		if e.Reason == "HoldReleased" {
			t.Errorf("a hold was released in the takeover: %s %s", e.InvolvedObject.Name, e.Message)
		}
	}
}

// TestAFrozenLeaderIsNotTakenOverEarly: a leader frozen with SIGSTOP is
// alive (the kernel still answers on its liveness address), so the
// follower waits for its Lease to expire, and never releases it early; the
// leader, let go on again, finds it lost the Lease and exits.
func TestAFrozenLeaderIsNotTakenOverEarly(t *testing.T) {
	cp := controlplane.Get(t)
	brokerNS := cp.Namespace(t)
	const lease, retry = 3 * time.Second, 250 * time.Millisecond
	election := []string{"--leader-elect", "--leader-elect-lease-duration", lease.String(),
		"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", retry.String()}
	brokers := map[string]*brokerProcess{}
	for _, id := range []string{"replica-a", "replica-b"} {
		brokers[id] = startBrokerProcess(t, cp, freeAddr(t), brokerNS, append([]string{"--identity", id}, election...)...)
	}
	leases := cp.Client().CoordinationV1().Leases(brokerNS)
	holder := func() string {
		l, err := leases.Get(context.Background(), "tether-broker-leader", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	eventually(t, "a leader", func() bool { return holder() != "" })
	leader := holder()
	var follower *brokerProcess
	for id, b := range brokers {
		if id != leader {
			follower = b
		}
	}
	eventually(t, "the follower reached the leader's liveness address", func() bool {
		return follower.out.Any(func(l string) bool { return strings.Contains(l, "the leader's liveness address answers") })
	})
	frozen := brokers[leader]
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	eventually(t, "the follower leads", func() bool { h := holder(); return h != "" && h != leader })
	took := time.Since(stopped)
	t.Logf("the follower led %v after the leader (%s) was frozen (lease %v)", took.Round(time.Millisecond), leader, lease)
	// The leader's last renewal came at most a retry period before it froze.
	if took < lease-retry {
		t.Errorf("the follower led %v after the leader froze, before its Lease (%v) could expire", took, lease)
	}
	if follower.out.Any(func(l string) bool { return strings.Contains(l, "released the Lease of a leader") }) {
		t.Error("the follower released the Lease of a leader that was frozen, not dead")
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	awaitExitOnLostLease(t, frozen)
}

// awaitExitOnLostLease waits for a leader let go on after a freeze past
// its Lease to find the Lease lost and exit.
func awaitExitOnLostLease(t *testing.T, p *brokerProcess) {
	t.Helper()
	eventually(t, "the leader, let go on, exits: it lost the Lease", func() bool {
		select {
		case <-p.done:
			return p.out.Any(func(l string) bool { return strings.Contains(l, "lost the leader lease") })
		default:
			return false
		}
	})
}
