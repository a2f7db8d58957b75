package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

const replicate = "replicator.tether.dev/enabled"

// TestHeldTimerStopsAndReleasesOnDelete is the replicator story: create,
// update and a 1-second timer on annotated Secrets, with the default
// policy, so the Secret is held. Deleting it stops the timer, releases the
// hold, and the Secret is gone within 2 s.
func TestHeldTimerStopsAndReleasesOnDelete(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.Dynamic(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	h := sdk.New("replicator", handlerOpts(t)...)
	only := []sdk.BindingOption{sdk.Namespaces(ns), sdk.AnnotationEquals(replicate, "true")}
	h.OnCreate(secrets, j.record(nil), only...)
	h.OnUpdate(secrets, j.record(nil), only...)
	h.OnTimer(secrets, time.Second, j.record(nil), only...)
	runHandler(t, h, addr)

	create(t, dyn, secretsGVR, secret(ns, "plain", nil, nil, ""))
	create(t, dyn, secretsGVR, secret(ns, "source", nil, map[string]string{replicate: "true"}, ""))
	j.waitCount(t, sdk.Create, "source", 1)
	j.waitCount(t, sdk.Tick, "source", 2) // ticks keep coming
	if obj := get(t, dyn, secretsGVR, ns, "source"); !hold.Has(obj, "replicator") {
		t.Fatalf("the timer's default policy should hold the Secret: %v", obj.GetFinalizers())
	}
	if obj := get(t, dyn, secretsGVR, ns, "plain"); hold.Has(obj, "replicator") {
		t.Fatal("a Secret that matches no binding is held")
	}

	start := time.Now()
	del(t, dyn, secretsGVR, ns, "source")
	waitObject(t, dyn, secretsGVR, ns, "source", "gone", gone)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the held Secret took %v to go, want under 2s", took)
	}
	ticks := len(j.find(sdk.Tick, "source"))
	// The hold was released only after the broker stopped the timer, so no
	// tick may follow. A marker's two ticks (a full interval) give any
	// stray one time to show up.
	create(t, dyn, secretsGVR, secret(ns, "marker", nil, map[string]string{replicate: "true"}, ""))
	j.waitCount(t, sdk.Tick, "marker", 2)
	if after := len(j.find(sdk.Tick, "source")); after != ticks {
		t.Errorf("%d ticks for the Secret after it was gone", after-ticks)
	}
}

// TestTTLReaperNeverHolds is the TTL story: a timer with finalizer NONE
// deletes Secrets older than their ttl annotation. No finalizer ever
// appears, and with the handler stopped a delete takes effect at once.
func TestTTLReaperNeverHolds(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.Dynamic(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var mu sync.Mutex
	finalizersSeen := map[string][]string{}
	h := sdk.New("ttl", handlerOpts(t)...)
	h.OnTimer(secrets, 200*time.Millisecond, func(ctx context.Context, ev *sdk.Event) error {
		mu.Lock()
		if f := ev.Object().GetFinalizers(); len(f) > 0 {
			finalizersSeen[ev.Name] = f
		}
		mu.Unlock()
		ttl, err := time.ParseDuration(ev.Object().GetAnnotations()["ttl.tether.dev/ttl"])
		if err != nil {
			return sdk.Permanent(err)
		}
		if time.Since(ev.Object().GetCreationTimestamp().Time) < ttl {
			return nil
		}
		err = cp.Dynamic(t).Resource(secretsGVR).Namespace(ev.Namespace).Delete(ctx, ev.Name, metav1.DeleteOptions{})
		if err != nil && !isNotFound(err) {
			return err
		}
		return nil
	}, sdk.Namespaces(ns), sdk.AnnotationPresent("ttl.tether.dev/ttl"), sdk.Finalizer(sdk.FinalizerNone))
	stop := runHandler(t, h, addr)

	create(t, dyn, secretsGVR, secret(ns, "short", nil, map[string]string{"ttl.tether.dev/ttl": "1s"}, ""))
	create(t, dyn, secretsGVR, secret(ns, "long", nil, map[string]string{"ttl.tether.dev/ttl": "1h"}, ""))
	waitObject(t, dyn, secretsGVR, ns, "short", "reaped", gone)
	if obj := get(t, dyn, secretsGVR, ns, "long"); len(obj.GetFinalizers()) > 0 {
		t.Errorf("the long-lived Secret has finalizers %v", obj.GetFinalizers())
	}
	mu.Lock()
	if len(finalizersSeen) > 0 {
		t.Errorf("finalizers seen on ticked Secrets: %v", finalizersSeen)
	}
	mu.Unlock()

	stop()
	del(t, dyn, secretsGVR, ns, "long")
	if obj := get(t, dyn, secretsGVR, ns, "long"); obj != nil {
		t.Errorf("with the handler stopped, the Secret is still there after delete: finalizers %v", obj.GetFinalizers())
	}
}

// TestDaemonStopsWithinCancellationTimeout: a daemon that returns when told
// to stop lets the hold go at once; one that ignores stop keeps the object
// only until its cancellation timeout, then a Warning Event says so.
func TestDaemonStopsWithinCancellationTimeout(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	release := make(chan struct{})
	defer close(release)
	h := sdk.New("daemons", handlerOpts(t)...)
	h.OnDaemon(widgets, j.record(func(ctx context.Context, ev *sdk.Event) error {
		if ev.Name == "stubborn" {
			<-release // ignores ctx
			return nil
		}
		<-ctx.Done()
		return nil
	}), sdk.Namespaces(ns), sdk.CancellationTimeout(2*time.Second))
	runHandler(t, h, addr)

	for _, name := range []string{"polite", "stubborn"} {
		create(t, dyn, widgetGVR, widget(ns, name, map[string]any{"size": int64(1)}))
		j.waitCount(t, sdk.DaemonStart, name, 1)
		waitObject(t, dyn, widgetGVR, ns, name, "held", func(o *unstructured.Unstructured) bool {
			return o != nil && hold.Has(o, "daemons")
		})
	}

	start := time.Now()
	del(t, dyn, widgetGVR, ns, "polite")
	waitObject(t, dyn, widgetGVR, ns, "polite", "gone", gone)
	if took := time.Since(start); took > time.Second {
		t.Errorf("a daemon that stops at once kept its object %v", took)
	}

	start = time.Now()
	del(t, dyn, widgetGVR, ns, "stubborn")
	waitObject(t, dyn, widgetGVR, ns, "stubborn", "gone", gone)
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("a daemon that ignores stop was let go after %v, before its 2s cancellation timeout", took)
	}
	eventually(t, "a DaemonStopTimeout event", func() bool {
		for _, e := range events(t, cp, ns, "stubborn") {
			if e.Reason == "DaemonStopTimeout" && e.Type == "Warning" {
				return true
			}
		}
		return false
	})
}

// TestRecreatedObjectIsAnotherObject is rule 5: with finalizer NONE the name
// is free at once, so X' is created while X's daemon is still stopping. X'
// gets its own daemon, X's stop is still awaited and acknowledged, and no
// tick for X is delivered after its deletion was seen.
func TestRecreatedObjectIsAnotherObject(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var mu sync.Mutex
	stopped := map[string]time.Time{} // uid -> when its daemon returned
	started := map[string]bool{}
	ticks := map[string][]time.Time{} // uid -> tick arrival
	letGo := make(chan struct{})
	h := sdk.New("rule5", handlerOpts(t)...)
	none := []sdk.BindingOption{sdk.Namespaces(ns), sdk.Finalizer(sdk.FinalizerNone)}
	h.OnDaemon(widgets, func(ctx context.Context, ev *sdk.Event) error {
		mu.Lock()
		started[ev.UID] = true
		mu.Unlock()
		<-ctx.Done()
		<-letGo // X's daemon takes its time to stop
		mu.Lock()
		stopped[ev.UID] = time.Now()
		mu.Unlock()
		return nil
	}, append(none, sdk.CancellationTimeout(time.Minute))...)
	h.OnTimer(widgets, 100*time.Millisecond, func(_ context.Context, ev *sdk.Event) error {
		mu.Lock()
		ticks[ev.UID] = append(ticks[ev.UID], time.Now())
		mu.Unlock()
		return nil
	}, none...)
	runHandler(t, h, addr)

	x := create(t, dyn, widgetGVR, widget(ns, "x", map[string]any{"size": int64(1)}))
	xUID := string(x.GetUID())
	eventually(t, "X's daemon and ticks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return started[xUID] && len(ticks[xUID]) > 0
	})
	del(t, dyn, widgetGVR, ns, "x")
	deletedSeen := time.Now()
	waitObject(t, dyn, widgetGVR, ns, "x", "gone at once (no finalizer)", gone)

	x2 := create(t, dyn, widgetGVR, widget(ns, "x", map[string]any{"size": int64(2)}))
	x2UID := string(x2.GetUID())
	eventually(t, "X' gets its own daemon while X's is still stopping", func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, xStopped := stopped[xUID]
		return started[x2UID] && !xStopped
	})
	close(letGo)
	eventually(t, "X's daemon acknowledged stop", func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := stopped[xUID]
		return ok && len(ticks[x2UID]) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, at := range ticks[xUID] {
		// The API server confirms the delete before the watch reports it,
		// so allow what was already in flight at that moment.
		if at.After(deletedSeen.Add(500 * time.Millisecond)) {
			t.Errorf("a tick for X arrived %v after its deletion", at.Sub(deletedSeen))
		}
	}
	if strings.EqualFold(xUID, x2UID) {
		t.Fatal("X and X' share a UID")
	}
}

// TestDaemonThatReturnsIsReportedAndRestartedWhenAsked: a daemon that
// returns an error by itself becomes a Warning Event, and is started again
// (with backoff) only because its binding asks for Restart; each start's
// Attempt counts the runs that failed before it.
func TestDaemonThatReturnsIsReportedAndRestartedWhenAsked(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	h := sdk.New("restarter", handlerOpts(t)...)
	h.OnDaemon(widgets, j.record(func(ctx context.Context, ev *sdk.Event) error {
		if len(j.find(sdk.DaemonStart, ev.Name)) < 3 {
			return errors.New("lost the connection to the thing it watches")
		}
		<-ctx.Done()
		return nil
	}), sdk.Namespaces(ns), sdk.Restart(), sdk.Backoff(100*time.Millisecond, time.Second))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "d", map[string]any{"size": int64(1)}))
	for i, ev := range j.waitCount(t, sdk.DaemonStart, "d", 3) {
		if ev.Attempt != i+1 {
			t.Errorf("start %d has attempt %d, want %d", i+1, ev.Attempt, i+1)
		}
	}
	eventually(t, "a DaemonFailed event", func() bool {
		return hasEvent(t, cp, ns, "d", "DaemonFailed", "lost the connection")
	})
}
