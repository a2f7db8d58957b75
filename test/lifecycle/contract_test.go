package lifecycle

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// The tests in this file play the sequences of the hold contract that once
// left objects stuck in Terminating or released holds that had to stay.

// TestEventBindingDoesNotKeepAHoldPastGrace: a handler with an event
// binding and a delete binding on the same resource is SIGKILLed and a held
// object is deleted. The raw events of the deletion have nobody to go to;
// they must not stand before the release once the grace is over.
func TestEventBindingDoesNotKeepAHoldPastGrace(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	const grace = 2 * time.Second
	addr := startBroker(t, cp, withAbsence(grace, time.Hour))
	h := startHandlerProcess(t, addr, "watcher", ns, "--events")
	createHeld(t, cp, ns, "watcher", "w")
	eventually(t, "the ADDED event delivered", func() bool { return h.saw("EVENT ADDED " + ns + "/w") })

	h.kill()
	killed := time.Now()
	del(t, dyn, widgetGVR, ns, "w")
	waitObject(t, dyn, widgetGVR, ns, "w", "released after the grace and gone", gone)
	t.Logf("released %v after the kill (grace %v)", time.Since(killed).Round(time.Millisecond), grace)
	eventually(t, "an Event naming rule 3c", func() bool { return hasEvent(t, cp, ns, "w", "HoldReleased", "rule 3c") })
}

// TestBrokerRestartGivesAFullGrace: the broker and its handler are down
// for longer than the handler's grace while a held object is deleted. The
// restarted broker must not release it at once from the Lease's last-seen:
// the handler, back within a grace of the broker becoming ready, runs its
// delete.
func TestBrokerRestartGivesAFullGrace(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	const grace = 3 * time.Second
	flags := []string{"--grace", grace.String(), "--absent-release-after", "1h", "--metrics-listen", metricsAddr}
	b := startBrokerProcess(t, cp, addr, brokerNS, flags...)
	h := startHandlerProcess(t, addr, "patient", ns)
	createHeld(t, cp, ns, "patient", "w")

	h.kill()
	b.kill()
	del(t, dyn, widgetGVR, ns, "w")
	// The outage must outlast the grace as the restarted broker will judge
	// it: from the handler's last sight recorded in its Lease.
	store := &presence.Store{Client: kubetest.Wrap(cp.Client()), Namespace: brokerNS}
	eventually(t, "the recorded last sight of the handler older than its grace", func() bool {
		recs, err := store.List(context.Background())
		if err != nil || len(recs) != 1 {
			return false
		}
		seen := recs[0].LastSeen
		if recs[0].AbsentSince.After(seen) {
			seen = recs[0].AbsentSince
		}
		return !seen.IsZero() && time.Since(seen) > grace+time.Second
	})

	startBrokerProcess(t, cp, addr, brokerNS, flags...)
	eventually(t, "the restarted broker ready", func() bool { return ready("http://" + metricsAddr + "/readyz") })
	back := startHandlerProcess(t, addr, "patient", ns)
	waitObject(t, dyn, widgetGVR, ns, "w", "gone", gone)
	if !back.saw("DELETE " + ns + "/w") {
		t.Errorf("the hold was released before the returning handler ran its delete")
	}
	if hasEvent(t, cp, ns, "w", "HoldReleased", "rule 3c") {
		t.Errorf("the restarted broker released by rule 3c")
	}
}

// TestFailingCreateStillRunsDelete: while the create handler keeps asking
// to be retried, the object is already held, so that deleting it runs the
// delete handler instead of letting it go unnoticed.
func TestFailingCreateStillRunsDelete(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	h := startHandlerProcess(t, addr, "stubborn", ns, "--fail-creates")
	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	eventually(t, "the create failing", func() bool { return h.saw("CREATE-FAILED " + ns + "/w") })
	waitObject(t, dyn, widgetGVR, ns, "w", "held while its create is retried", heldBy("stubborn"))

	h.deleteRunsItsDelete(t, dyn, ns, "w")
}

// TestStrictHoldWaitsForTheHandlersAnswer: a STRICT delete binding whose
// retries run out is not given up by the broker: the hold stays until the
// handler's delete succeeds.
func TestStrictHoldWaitsForTheHandlersAnswer(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	h := startHandlerProcess(t, addr, "careful", ns, "--strict", "--retries", "1", "--delete-fails", "3")
	createHeld(t, cp, ns, "careful", "w")

	del(t, dyn, widgetGVR, ns, "w")
	waitObject(t, dyn, widgetGVR, ns, "w", "gone", gone)
	if n := h.out.Count(func(l string) bool { return l == "DELETE-FAILED "+ns+"/w" }); n != 3 {
		t.Errorf("the delete failed %d times before the release, want 3", n)
	}
	if !h.saw("DELETE " + ns + "/w") {
		t.Error("the STRICT hold was released without the handler's answer")
	}
}

// TestNoLongerMatchingReleasesWithRule: a held object whose labels stop
// matching is released, and the Event names rule 3e.
func TestNoLongerMatchingReleasesWithRule(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	startHandlerProcess(t, addr, "picky", ns, "--labels", "keep=yes")
	w := widget(ns, "w", map[string]any{"size": int64(1)})
	w.SetLabels(map[string]string{"keep": "yes"})
	create(t, dyn, widgetGVR, w)
	waitObject(t, dyn, widgetGVR, ns, "w", "held", heldBy("picky"))

	setLabels(t, cp, ns, "w", map[string]string{"keep": "no"})
	waitObject(t, dyn, widgetGVR, ns, "w", "released", func(o *unstructured.Unstructured) bool {
		return o != nil && !hold.Has(o, "picky")
	})
	eventually(t, "an Event naming rule 3e", func() bool { return hasEvent(t, cp, ns, "w", "HoldReleased", "rule 3e") })
}

// ready reports whether url answers 200; a broker still starting does not.
func ready(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestRolloutToNewBindings: a handler rolled out with other bindings (v2
// adds an event binding) starts while v1 is still connected. v2 is told to
// retry, not refused for good; once v1 has left, v2 takes over, and the
// hold stays on through the change.
func TestRolloutToNewBindings(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	v1 := startHandlerProcess(t, addr, "rolled", ns)
	createHeld(t, cp, ns, "rolled", "w")

	v2 := startHandlerProcess(t, addr, "rolled", ns, "--events")
	eventually(t, "v2 refused while v1 is connected", func() bool {
		return v2.log.Any(func(l string) bool { return strings.Contains(l, "bindings differ") })
	})
	if err := v1.terminate(); err != nil {
		t.Fatalf("v1 did not stop cleanly: %v", err)
	}
	eventually(t, "v2 connected with its event binding", func() bool { return v2.saw("EVENT ADDED " + ns + "/w") })
	if obj := get(t, dyn, widgetGVR, ns, "w"); !hold.Has(obj, "rolled") {
		t.Errorf("the hold went during the rollout: %v", obj.GetFinalizers())
	}
	v2.deleteRunsItsDelete(t, dyn, ns, "w")
}

// TestNarrowedBindingsReleaseWhatTheyDropped: a handler comes back binding
// one namespace of the two it held objects in. It no longer watches the
// other, so no informer would show those objects again: the broker sweeps
// the dropped namespace and releases them (rule 3e), and keeps the rest.
func TestNarrowedBindingsReleaseWhatTheyDropped(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	kept, droppedNS := cp.Namespace(t), cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	v1 := startHandlerProcess(t, addr, "narrowed", kept+","+droppedNS)
	createHeld(t, cp, kept, "narrowed", "a")
	createHeld(t, cp, droppedNS, "narrowed", "b")
	if err := v1.terminate(); err != nil {
		t.Fatalf("v1 did not stop cleanly: %v", err)
	}

	startHandlerProcess(t, addr, "narrowed", kept)
	waitObject(t, dyn, widgetGVR, droppedNS, "b", "released from the dropped namespace", func(o *unstructured.Unstructured) bool {
		return o != nil && !hold.Has(o, "narrowed")
	})
	eventually(t, "an Event naming rule 3e", func() bool { return hasEvent(t, cp, droppedNS, "b", "HoldReleased", "rule 3e") })
	if obj := get(t, dyn, widgetGVR, kept, "a"); !hold.Has(obj, "narrowed") {
		t.Errorf("the hold in the namespace still bound went: %v", obj.GetFinalizers())
	}
	del(t, dyn, widgetGVR, droppedNS, "b")
	waitObject(t, dyn, widgetGVR, droppedNS, "b", "gone", gone)
}

// TestRollingRestartUsesNoRetries: an instance stopping gracefully hands
// back what reaches it while it drains (its own slow work keeps it
// draining). Those hand-backs are not attempts: with Retries(1), the
// deletes of the objects it owned go to the other instance, and none is
// given up and released without its delete handler.
func TestRollingRestartUsesNoRetries(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	names := []string{"y0", "y1", "y2", "y3", "y4", "y5", "y6", "y7"}

	var deleted journal
	slow := make(chan struct{})
	var slowOnce sync.Once
	defer slowOnce.Do(func() { close(slow) })
	instance := func(id string) *sdk.Handler {
		h := sdk.New("rolling-retries", append(handlerOpts(t), sdk.WithInstanceID(id))...)
		h.OnCreate(widgets, func(ctx context.Context, ev *sdk.Event) error {
			if ev.Name == "slow" {
				select {
				case <-slow:
				case <-ctx.Done():
				}
			}
			return nil
		}, sdk.Namespaces(ns))
		h.OnDelete(widgets, deleted.record(nil), sdk.Namespaces(ns), sdk.Retries(1))
		return h
	}
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- instance("a").Run(ctxA, addr) }()
	t.Cleanup(func() { stopA(); <-doneA })
	createHeld(t, cp, ns, "rolling-retries", names...)
	create(t, dyn, widgetGVR, widget(ns, "slow", map[string]any{"size": int64(1)}))
	waitObject(t, dyn, widgetGVR, ns, "slow", "held while its create runs", heldBy("rolling-retries"))

	runHandler(t, instance("b"), addr)
	stopA() // a drains: its create of "slow" is still running
	for _, n := range names {
		del(t, dyn, widgetGVR, ns, n)
	}
	for _, n := range names {
		waitObject(t, dyn, widgetGVR, ns, n, "gone", gone)
	}
	slowOnce.Do(func() { close(slow) })
	for _, n := range names {
		if len(deleted.find(sdk.Delete, n)) == 0 {
			t.Errorf("%s was released without its delete handler", n)
		}
	}
}

// TestStrictDaemonHoldWaitsForADrainingInstance: an object whose STRICT
// daemon runs on an instance that is draining is deleted. The broker's stop
// finds the instance leaving; the hold must stay until the daemon has
// really returned (the session ends then), not go at once.
func TestStrictDaemonHoldWaitsForADrainingInstance(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	var started, cancelled atomic.Bool
	var goneWhileRunning atomic.Bool
	h := sdk.New("careful-daemon", handlerOpts(t)...)
	h.OnDaemon(widgets, func(ctx context.Context, ev *sdk.Event) error {
		started.Store(true)
		<-ctx.Done()
		cancelled.Store(true)
		// Cleanup that takes a while (bounded): the object must outlive it.
		for range 60 {
			// Not get: t.Fatal belongs to the test's goroutine.
			if _, err := dyn.Resource(widgetGVR).Namespace(ns).Get(context.Background(), ev.Name, metav1.GetOptions{}); isNotFound(err) {
				goneWhileRunning.Store(true)
				return nil
			}
			<-time.After(50 * time.Millisecond)
		}
		return nil
	}, sdk.Namespaces(ns), sdk.Finalizer(sdk.FinalizerStrict), sdk.CancellationTimeout(time.Minute))
	stop := runHandler(t, h, addr)
	createHeld(t, cp, ns, "careful-daemon", "w")
	eventually(t, "the daemon to start", started.Load)

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// Draining: Goodbye went before the daemon was cancelled.
	eventually(t, "the daemon cancelled by the drain", cancelled.Load)
	del(t, dyn, widgetGVR, ns, "w")
	waitObject(t, dyn, widgetGVR, ns, "w", "released once the daemon returned", gone)
	<-stopped
	if goneWhileRunning.Load() {
		t.Error("the STRICT hold was released while the daemon was still stopping")
	}
}

// TestDeletionIsNotHeldBackByAWaitForAnInstance: the only instance of a
// handler whose one binding is a daemon stops. Its worker then waits for an
// instance to start the daemon again; the object deleted meanwhile must not
// wait behind that for the whole grace: the daemon ended with its session,
// there is no other deletion work, so the hold goes at once.
func TestDeletionIsNotHeldBackByAWaitForAnInstance(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Hour, 0))
	var started atomic.Bool
	h := sdk.New("daemonic", handlerOpts(t)...)
	h.OnDaemon(widgets, func(ctx context.Context, ev *sdk.Event) error {
		started.Store(true)
		<-ctx.Done()
		return nil
	}, sdk.Namespaces(ns))
	stop := runHandler(t, h, addr)
	createHeld(t, cp, ns, "daemonic", "w")
	eventually(t, "the daemon started", started.Load)

	stop()
	del(t, dyn, widgetGVR, ns, "w")
	waitObject(t, dyn, widgetGVR, ns, "w", "released well within the grace of an hour", gone)
}
