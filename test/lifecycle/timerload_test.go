package lifecycle

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

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
	)
	cp := controlplane.Get(t)
	addr := startBroker(t, cp, func(o *broker.Options) {
		o.Workers = 4
		o.WriteQPS, o.WriteBurst = writeQPS, 1
	})
	start, end := ticksDuringBulkHolds(t, cp, addr, bulk)
	// The first hold of the bulk may use the burst; the others come one
	// write interval apart.
	if took, least := end.Sub(start), time.Duration(bulk-1)*time.Second/writeQPS; took < least*8/10 {
		t.Errorf("%d holds landed in %v: faster than %d writes per second allow (%v)", bulk, took, writeQPS, least)
	}
}

// TestTicksKeepTimeWhileTheAPIServerIsSlowToWrite: the API server answers
// each write only after half a second, far more slowly than the broker's
// write rate allows, while many new objects need a hold. The writes whose
// turn came must not take every worker of the handler: a timer on an object
// that is already held keeps ticking on time meanwhile.
func TestTicksKeepTimeWhileTheAPIServerIsSlowToWrite(t *testing.T) {
	cp := controlplane.Get(t)
	slow := slowWrites(t, cp, 500*time.Millisecond)
	addr := startBroker(t, cp, func(o *broker.Options) {
		o.Config = slow
		o.Workers = 4
		o.WriteQPS, o.WriteBurst = 1000, 1000 // the rate is not what holds writes back
	})
	ticksDuringBulkHolds(t, cp, addr, 24)
}

// ticksDuringBulkHolds runs a handler with a 200 ms timer on Widgets
// against the broker at addr, and once an early Widget is held and ticking
// creates bulk more and waits until all are held. It fails the test if the
// early Widget went more than a second without a tick, or had a tick more
// than a second late, meanwhile; it returns when the bulk was created and
// when its last hold landed.
func ticksDuringBulkHolds(t *testing.T, cp *controlplane.ControlPlane, addr string, bulk int) (start, end time.Time) {
	t.Helper()
	const (
		interval = 200 * time.Millisecond
		// maxGap is the longest the held object may go without a tick.
		maxGap = time.Second
	)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
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

	start = time.Now()
	for i := range bulk {
		create(t, dyn, widgetGVR, widget(ns, fmt.Sprintf("bulk-%02d", i), map[string]any{"size": int64(1)}))
	}
	for i := range bulk {
		waitObject(t, dyn, widgetGVR, ns, fmt.Sprintf("bulk-%02d", i), "held",
			func(o *unstructured.Unstructured) bool { return o != nil && hold.Has(o, "paced") })
	}
	end = time.Now()

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
	return start, end
}

// slowWrites is a front of the API server, for a broker's Config, that
// answers each PATCH of a Widget only after delay, and everything else at
// once: an API server slower to write than the broker's write rate allows.
func slowWrites(t *testing.T, cp *controlplane.ControlPlane, delay time.Duration) *rest.Config {
	t.Helper()
	cfg := cp.RESTConfig()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatalf("a transport to the API server: %v", err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatalf("the API server's address %q: %v", cfg.Host, err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/"+widgetGVR.Resource+"/") {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
	})
	return &rest.Config{Host: front.URL, QPS: cfg.QPS, Burst: cfg.Burst}
}

// TestFirstTicksOfAnInitialListSpreadOverOneInterval: objects that exist
// when the handler connects all arrive in one initial list; their first
// ticks are spread over one interval instead of coming in the same
// millisecond. An object created later still ticks first after its
// initial delay.
func TestFirstTicksOfAnInitialListSpreadOverOneInterval(t *testing.T) {
	const (
		listed   = 40
		interval = 2 * time.Second
		delay    = 300 * time.Millisecond
	)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)
	for i := range listed {
		create(t, dyn, widgetGVR, widget(ns, fmt.Sprintf("listed-%02d", i), map[string]any{"size": int64(1)}))
	}

	var mu sync.Mutex
	first := map[string]time.Time{} // Scheduled of each object's first tick
	h := sdk.New("spread", handlerOpts(t)...)
	h.OnTimer(widgets, interval, func(_ context.Context, ev *sdk.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := first[ev.Name]; !ok {
			first[ev.Name] = ev.Scheduled
		}
		return nil
	}, sdk.Namespaces(ns), sdk.InitialDelay(delay), sdk.Finalizer(sdk.FinalizerNone))
	connected := time.Now()
	runHandler(t, h, addr)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(first)
	}
	eventually(t, "a first tick for every listed object", func() bool { return count() == listed })

	mu.Lock()
	var earliest, latest time.Time
	for _, at := range first {
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
		if at.After(latest) {
			latest = at
		}
	}
	mu.Unlock()
	if span := latest.Sub(earliest); span < interval/2 || span > interval {
		t.Errorf("the first ticks of %d listed objects span %v, want most of one interval (%v) and no more", listed, span, interval)
	}
	if earliest.Before(connected.Add(delay)) {
		t.Errorf("a first tick was due %v after the handler connected, before the initial delay of %v", earliest.Sub(connected), delay)
	}

	created := time.Now()
	create(t, dyn, widgetGVR, widget(ns, "later", map[string]any{"size": int64(1)}))
	eventually(t, "the later object's first tick", func() bool { return count() == listed+1 })
	mu.Lock()
	due := first["later"].Sub(created)
	mu.Unlock()
	if due < delay || due > delay+interval/2 {
		t.Errorf("the later object's first tick was due %v after it was created, want its initial delay %v (no spread)", due, delay)
	}
}

// TestReleaseOfDeletedObjectDoesNotWaitBehindLongAbsenceStrips: a handler
// long absent has its holds stripped at a slow pace, one object after
// another. An object deleted meanwhile must be released (its grace is long
// over) at once, not after every strip queued before it: waiting for a
// strip's turn must not hold a worker.
func TestReleaseOfDeletedObjectDoesNotWaitBehindLongAbsenceStrips(t *testing.T) {
	const (
		releaseQPS = 2
		bulk       = 30 // 15 s of strips at releaseQPS
	)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, func(o *broker.Options) {
		o.Workers = 2
		o.ReleaseQPS = releaseQPS
	})
	h := sdk.New("stripped", append(handlerOpts(t), sdk.WithGrace(time.Second), sdk.WithAbsentReleaseAfter(2*time.Second))...)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.Namespaces(ns))
	stop := runHandler(t, h, addr)
	names := make([]string, bulk)
	for i := range names {
		names[i] = fmt.Sprintf("held-%02d", i)
	}
	createHeld(t, cp, ns, "stripped", names...)

	stop()
	// Once the first strips land, the handler is long absent and the rest
	// wait for their turns; delete one of those.
	var still []string
	eventually(t, "the first holds to be stripped", func() bool {
		still = still[:0]
		for _, n := range names {
			if hold.Has(get(t, dyn, widgetGVR, ns, n), "stripped") {
				still = append(still, n)
			}
		}
		return len(still) < bulk
	})
	if len(still) < bulk/2 {
		t.Fatalf("%d of %d holds stripped at once; the release limiter of %d/s does not pace them", bulk-len(still), bulk, releaseQPS)
	}
	last := still[len(still)-1]
	deleted := time.Now()
	del(t, dyn, widgetGVR, ns, last)
	waitObject(t, dyn, widgetGVR, ns, last, "released and gone", gone)
	took := time.Since(deleted)
	t.Logf("the deleted object was released %v after its deletion, with %d strips queued at %d/s", took.Round(time.Millisecond), bulk, releaseQPS)
	if took > 3*time.Second {
		t.Fatalf("the deleted object waited %v for its release, behind the paced strips", took)
	}
}
