package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestTicksKeepTimeWhileHoldWritesWait: many new objects need a hold at
// once while writes are paced far below what they need, and the handler has
// few workers. A timer on an object that is already held must keep ticking
// on time meanwhile: a tick writes nothing, so it must not queue behind
// writes that only wait for their turn. The holds still land, no faster
// than the write rate allows.
func TestTicksKeepTimeWhileHoldWritesWait(t *testing.T) {
	const (
		writeQPS = 10
		bulk     = 50
		interval = 200 * time.Millisecond
		// maxGap is the longest the held object may go without a tick.
		maxGap = time.Second
	)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, func(o *broker.Options) {
		o.Workers = 4
		o.WriteQPS, o.WriteBurst = writeQPS, 1
	})

	var mu sync.Mutex
	var early []time.Time // arrivals of the early object's ticks
	var maxLate time.Duration
	h := sdk.New("paced", handlerOpts(t)...)
	h.OnTimer(widgets, interval, func(_ context.Context, ev *sdk.Event) error {
		if ev.Name != "early" {
			return nil
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		early = append(early, now)
		maxLate = max(maxLate, now.Sub(ev.Scheduled))
		return nil
	}, sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "early", map[string]any{"size": int64(1)}))
	waitObject(t, dyn, widgetGVR, ns, "early", "held", func(o *unstructured.Unstructured) bool { return o != nil && hold.Has(o, "paced") })
	ticks := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(early)
	}
	eventually(t, "two ticks of the held object", func() bool { return ticks() >= 2 })

	start := time.Now()
	for i := range bulk {
		create(t, dyn, widgetGVR, widget(ns, fmt.Sprintf("bulk-%02d", i), map[string]any{"size": int64(1)}))
	}
	for i := range bulk {
		waitObject(t, dyn, widgetGVR, ns, fmt.Sprintf("bulk-%02d", i), "held",
			func(o *unstructured.Unstructured) bool { return o != nil && hold.Has(o, "paced") })
	}
	end := time.Now()
	// The first hold of the bulk may use the burst; the others come one
	// write interval apart.
	if took, least := end.Sub(start), time.Duration(bulk-1)*time.Second/writeQPS; took < least*8/10 {
		t.Errorf("%d holds landed in %v: faster than %d writes per second allow (%v)", bulk, took, writeQPS, least)
	}

	mu.Lock()
	defer mu.Unlock()
	prev := start
	n := 0
	for _, at := range early {
		if at.Before(start) {
			continue
		}
		if at.After(end) {
			break
		}
		if gap := at.Sub(prev); gap > maxGap {
			t.Errorf("the held object had no tick for %v (from %v to %v after the bulk was created) while holds were written",
				gap.Round(time.Millisecond), prev.Sub(start).Round(time.Millisecond), at.Sub(start).Round(time.Millisecond))
		}
		prev = at
		n++
	}
	if gap := end.Sub(prev); gap > maxGap {
		t.Errorf("the held object's last tick before the holds were all written came %v before the end", gap.Round(time.Millisecond))
	}
	if want := int(end.Sub(start)/interval) / 2; n < want {
		t.Errorf("%d ticks of the held object in %v, want at least %d", n, end.Sub(start).Round(time.Millisecond), want)
	}
	if maxLate > maxGap {
		t.Errorf("a tick of the held object was %v late", maxLate)
	}
}
