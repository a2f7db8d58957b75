package lifecycle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// TestRecreatedDuringAWatchGapEndsTheOldObject is sequence 6 of the hold
// contract: while the broker is cut off from the API server, X is deleted
// and X' created under the same name; the API server restarts meanwhile,
// so the broker's watch cannot resume (410 Gone) and its informer relists.
// client-go reports the relist as one update from X to X'. X is gone all the
// same: its NONE daemon is stopped and its NONE timer stops ticking (rule 5),
// while X' gets its own.
func TestRecreatedDuringAWatchGapEndsTheOldObject(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	proxy, _ := apiProxy(t, cp)
	addr := startBroker(t, cp, func(o *broker.Options) { o.Config.Host = "https://" + proxy.Listen })

	var mu sync.Mutex
	running := map[string]bool{} // uid -> its daemon is running
	ticks := map[string][]time.Time{}
	h := sdk.New("relist", handlerOpts(t)...)
	none := []sdk.BindingOption{sdk.Namespaces(ns), sdk.Finalizer(sdk.FinalizerNone)}
	h.OnDaemon(widgets, func(ctx context.Context, ev *sdk.Event) error {
		mu.Lock()
		running[ev.UID] = true
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		running[ev.UID] = false
		mu.Unlock()
		return nil
	}, none...)
	h.OnTimer(widgets, 100*time.Millisecond, func(_ context.Context, ev *sdk.Event) error {
		mu.Lock()
		ticks[ev.UID] = append(ticks[ev.UID], time.Now())
		mu.Unlock()
		return nil
	}, none...)
	runHandler(t, h, addr)
	state := func(uid string) (daemon bool, nticks int, last time.Time) {
		mu.Lock()
		defer mu.Unlock()
		ts := ticks[uid]
		if len(ts) > 0 {
			last = ts[len(ts)-1]
		}
		return running[uid], len(ts), last
	}

	x := create(t, dyn, widgetGVR, widget(ns, "x", map[string]any{"size": int64(1)}))
	xUID := string(x.GetUID())
	eventually(t, "X's daemon and ticks", func() bool {
		d, n, _ := state(xUID)
		return d && n > 0
	})

	proxy.Stop()
	del(t, dyn, widgetGVR, ns, "x")
	waitObject(t, dyn, widgetGVR, ns, "x", "gone at once (no finalizer)", gone)
	x2 := create(t, dyn, widgetGVR, widget(ns, "x", map[string]any{"size": int64(2)}))
	x2UID := string(x2.GetUID())
	if err := cp.RestartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}

	// The reflector's backoff after the outage can reach several seconds.
	testenv.Eventually(t, 2*waitTimeout, "X' to get its own daemon and ticks after the relist", func() bool {
		d, n, _ := state(x2UID)
		return d && n > 0
	})
	relisted := time.Now()
	eventually(t, "X's daemon to be stopped", func() bool {
		d, _, _ := state(xUID)
		return !d
	})
	// Give a tick for X that the broker still believed in a full second to
	// show up, then look: none may come after the relist.
	eventually(t, "X' to tick for a second past the relist", func() bool {
		_, _, last := state(x2UID)
		return last.After(relisted.Add(time.Second))
	})
	if _, _, last := state(xUID); last.After(relisted.Add(500 * time.Millisecond)) {
		t.Errorf("X ticked %v after the relist showed it gone", last.Sub(relisted))
	}
}
