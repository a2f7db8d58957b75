package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// daemonLog counts a daemon's starts and stops by object name.
type daemonLog struct {
	mu            sync.Mutex
	starts, stops map[string]int
}

func (d *daemonLog) run(ctx context.Context, ev *sdk.Event) error {
	d.mu.Lock()
	if d.starts == nil {
		d.starts, d.stops = map[string]int{}, map[string]int{}
	}
	d.starts[ev.Name]++
	d.mu.Unlock()
	<-ctx.Done()
	d.mu.Lock()
	d.stops[ev.Name]++
	d.mu.Unlock()
	return nil
}

func (d *daemonLog) count(name string) (starts, stops int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.starts[name], d.stops[name]
}

// TestHeldObjectThatStopsMatchingIsReleasedWithPushdown: every binding of
// the handler selects keep=yes, so the broker asks the API server for those
// Widgets only and caches nothing else. A held Widget relabelled keep=no
// leaves that watch as if it were deleted; the broker must see that it was
// not: its hold is released by rule 3e, its daemon stopped, no delete and no
// DELETED event delivered, and the Widget stays. Labelled keep=yes again,
// it is held and its daemon runs again.
func TestHeldObjectThatStopsMatchingIsReleasedWithPushdown(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr, base := startBrokerWithMetrics(t, cp)

	var deletes, events journal
	var daemons daemonLog
	keep := []sdk.BindingOption{sdk.Namespaces(ns), sdk.Labels("keep=yes")}
	h := sdk.New("pushed", handlerOpts(t)...)
	h.OnDelete(widgets, deletes.record(nil), keep...)
	h.OnEvent(widgets, events.record(nil), keep...)
	h.OnDaemon(widgets, daemons.run, keep...)
	runHandler(t, h, addr)

	for i := range 5 {
		other := widget(ns, fmt.Sprintf("other-%d", i), map[string]any{"size": int64(1)})
		other.SetLabels(map[string]string{"keep": "no"})
		create(t, dyn, widgetGVR, other)
	}
	w := widget(ns, "w", map[string]any{"size": int64(1)})
	w.SetLabels(map[string]string{"keep": "yes"})
	create(t, dyn, widgetGVR, w)
	waitObject(t, dyn, widgetGVR, ns, "w", "held", heldBy("pushed"))
	eventually(t, "the daemon of w to run", func() bool { s, _ := daemons.count("w"); return s == 1 })
	cached := func() float64 {
		n, _ := sumOf(metricFamilies(t, base+"/metrics"), "tether_cached_objects", map[string]string{"resource": "widgets.test.tether.dev"})
		return n
	}
	if n := cached(); n != 1 {
		t.Errorf("%v Widgets cached, want 1: the selector keep=yes was not sent to the API server", n)
	}

	setLabels(t, cp, ns, "w", map[string]string{"keep": "no"})
	waitObject(t, dyn, widgetGVR, ns, "w", "released, and still there", func(o *unstructured.Unstructured) bool {
		return o != nil && !hold.Has(o, "pushed")
	})
	eventually(t, "an Event naming rule 3e", func() bool { return hasEvent(t, cp, ns, "w", "HoldReleased", "rule 3e") })
	eventually(t, "the daemon of w to stop", func() bool { _, s := daemons.count("w"); return s == 1 })
	eventually(t, "w no longer cached", func() bool { return cached() == 0 })
	if d := deletes.find(sdk.Delete, "w"); len(d) > 0 {
		t.Errorf("the delete binding ran for a Widget that was only relabelled: %d times", len(d))
	}
	for _, ev := range events.find(sdk.Watch, "w") {
		if ev.WatchType == "DELETED" {
			t.Error("a DELETED event was delivered for a Widget that was only relabelled")
		}
	}

	setLabels(t, cp, ns, "w", map[string]string{"keep": "yes"})
	waitObject(t, dyn, widgetGVR, ns, "w", "held again", heldBy("pushed"))
	eventually(t, "the daemon of w to run again", func() bool { s, _ := daemons.count("w"); return s == 2 })

	del(t, dyn, widgetGVR, ns, "w")
	waitObject(t, dyn, widgetGVR, ns, "w", "gone", gone)
	deletes.waitCount(t, sdk.Delete, "w", 1)
}

// TestRelabelledWhileTheBrokerWasDownIsReleasedAtStart: a held Widget
// relabelled out of the handler's selector while no broker runs is never
// listed by the next broker's filtered informer; its sweep at start finds
// it and releases it (rule 3e), and keeps the hold on what still matches.
func TestRelabelledWhileTheBrokerWasDownIsReleasedAtStart(t *testing.T) {
	cp, dyn, ns, first, restart := pushedBehindABrokerProcess(t)
	for _, name := range []string{"kept", "relabelled"} {
		w := widget(ns, name, map[string]any{"size": int64(1)})
		w.SetLabels(map[string]string{"keep": "yes"})
		create(t, dyn, widgetGVR, w)
		waitObject(t, dyn, widgetGVR, ns, name, "held", heldBy("pushed"))
	}

	first.kill()
	setLabels(t, cp, ns, "relabelled", map[string]string{"keep": "no"})
	restart()
	waitObject(t, dyn, widgetGVR, ns, "relabelled", "released at the broker's start", func(o *unstructured.Unstructured) bool {
		return o != nil && !hold.Has(o, "pushed")
	})
	eventually(t, "an Event naming rule 3e", func() bool { return hasEvent(t, cp, ns, "relabelled", "HoldReleased", "rule 3e") })
	if obj := get(t, dyn, widgetGVR, ns, "kept"); !hold.Has(obj, "pushed") {
		t.Errorf("the hold on what still matches went: %v", obj.GetFinalizers())
	}
}

// TestSweepAtStartReadsEveryPage: the sweep at a broker's start lists a
// pushed resource page by page. A held object relabelled while no broker
// watched, listed behind a thousand others (two pages of the sweep), is
// released as well.
func TestSweepAtStartReadsEveryPage(t *testing.T) {
	const fillers = 1000
	cp, dyn, ns, first, restart := pushedBehindABrokerProcess(t)
	// A list comes in the order of names: the fillers before it.
	held := widget(ns, "zz-relabelled", map[string]any{"size": int64(1)})
	held.SetLabels(map[string]string{"keep": "yes"})
	create(t, dyn, widgetGVR, held)
	waitObject(t, dyn, widgetGVR, ns, "zz-relabelled", "held", heldBy("pushed"))
	for i := range fillers {
		create(t, dyn, widgetGVR, widget(ns, fmt.Sprintf("filler-%04d", i), map[string]any{"size": int64(1)}))
	}

	first.kill()
	setLabels(t, cp, ns, "zz-relabelled", map[string]string{"keep": "no"})
	restart()
	waitObject(t, dyn, widgetGVR, ns, "zz-relabelled", "released at the broker's start", func(o *unstructured.Unstructured) bool {
		return o != nil && !hold.Has(o, "pushed")
	})
}

// pushedBehindABrokerProcess runs a broker process and the handler
// "pushed", whose one delete binding selects keep=yes in ns (so its
// informers are pushed down). restart starts another broker process in
// place of first, at the same address, once the test killed it.
func pushedBehindABrokerProcess(t *testing.T) (cp *controlplane.ControlPlane, dyn dynamic.Interface, ns string, first *brokerProcess, restart func()) {
	t.Helper()
	cp = controlplane.Get(t)
	dyn = cp.EnsureWidgetCRD(t)
	ns = cp.Namespace(t)
	addr, brokerNS := freeAddr(t), cp.Namespace(t)
	first = startBrokerProcess(t, cp, addr, brokerNS)

	h := sdk.New("pushed", handlerOpts(t)...)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.Namespaces(ns), sdk.Labels("keep=yes"))
	runHandler(t, h, addr)
	return cp, dyn, ns, first, func() { startBrokerProcess(t, cp, addr, brokerNS) }
}
