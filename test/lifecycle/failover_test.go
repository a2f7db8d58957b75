package lifecycle

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// roundRobin dials the brokers in turn, as a Service in front of the
// replicas would: a follower refuses Connect with Unavailable, the SDK
// reconnects, and the next dial reaches the other replica.
func roundRobin(addrs ...string) sdk.Dialer {
	var n atomic.Uint64
	return func(ctx context.Context, _ string) (net.Conn, error) {
		addr := addrs[int(n.Add(1))%len(addrs)]
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

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
	h := sdk.New("failover", append(handlerOpts(t), sdk.WithDialer(roundRobin(addrs...)))...)
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
