package lifecycle

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

func setSpec(t *testing.T, cp *controlplane.ControlPlane, ns, name string, spec map[string]any) {
	t.Helper()
	updateWidget(t, cp, ns, name, func(obj *unstructured.Unstructured) { obj.Object["spec"] = spec })
}

func setLabels(t *testing.T, cp *controlplane.ControlPlane, ns, name string, labels map[string]string) {
	t.Helper()
	updateWidget(t, cp, ns, name, func(obj *unstructured.Unstructured) { obj.SetLabels(labels) })
}

// updateWidget changes a widget with change. The broker writes the object
// too (its last-handled state): it retries on conflict as any client would.
func updateWidget(t *testing.T, cp *controlplane.ControlPlane, ns, name string, change func(*unstructured.Unstructured)) {
	t.Helper()
	dyn := cp.Dynamic(t)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj := get(t, dyn, widgetGVR, ns, name)
		change(obj)
		_, err := dyn.Resource(widgetGVR).Namespace(ns).Update(context.Background(), obj, metav1UpdateOptions)
		return err
	})
	if err != nil {
		t.Fatalf("updating %s: %v", name, err)
	}
}

// TestFieldBindingSeesOnlyItsField: a field binding fires when its field
// changes, with old and new narrowed to it, and not when another field does.
func TestFieldBindingSeesOnlyItsField(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var fields, updates journal
	h := sdk.New("fields", handlerOpts(t)...)
	h.OnField(widgets, "spec.size", fields.record(nil), sdk.Namespaces(ns))
	h.OnUpdate(widgets, updates.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "f", map[string]any{"size": int64(1), "color": "red"}))
	waitObject(t, dyn, widgetGVR, ns, "f", "create handled", func(o *unstructured.Unstructured) bool {
		return o != nil && len(o.GetAnnotations()) > 0
	})
	setSpec(t, cp, ns, "f", map[string]any{"size": int64(1), "color": "blue"})
	updates.waitCount(t, sdk.Update, "f", 1)
	setSpec(t, cp, ns, "f", map[string]any{"size": int64(2), "color": "blue"})
	updates.waitCount(t, sdk.Update, "f", 2)
	got := fields.waitCount(t, sdk.Field, "f", 1)[0]
	if !equalJSON(got.FieldOld, 1) || !equalJSON(got.FieldNew, 2) {
		t.Errorf("field old/new = %v/%v, want 1/2", got.FieldOld, got.FieldNew)
	}
}

// TestEventBindingGetsRawEventsAndNeverHolds: ADDED, MODIFIED and DELETED
// arrive in order and no finalizer is ever added.
func TestEventBindingGetsRawEventsAndNeverHolds(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	h := sdk.New("raw", handlerOpts(t)...)
	h.OnEvent(widgets, j.record(func(_ context.Context, ev *sdk.Event) error {
		if ev.Object() != nil && hold.Has(ev.Object(), "raw") {
			return sdk.Permanent(errors.New("event bindings must never hold"))
		}
		return nil
	}), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "e", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Watch, "e", 1)
	setSpec(t, cp, ns, "e", map[string]any{"size": int64(2)})
	j.waitCount(t, sdk.Watch, "e", 2)
	del(t, dyn, widgetGVR, ns, "e")
	evs := j.waitCount(t, sdk.Watch, "e", 3)
	var types []string
	for _, ev := range evs {
		types = append(types, ev.WatchType)
	}
	if !slices.Equal(types, []string{"ADDED", "MODIFIED", "DELETED"}) {
		t.Errorf("watch types = %v", types)
	}
}

// TestResumeOnHandlerReturn: objects handled before are delivered as resume
// when the handler comes back, and create does not run again.
func TestResumeOnHandlerReturn(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	newHandler := func() *sdk.Handler {
		h := sdk.New("resumer", handlerOpts(t)...)
		h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
		h.OnResume(widgets, j.record(nil), sdk.Namespaces(ns))
		return h
	}
	stop := runHandler(t, newHandler(), addr)
	create(t, dyn, widgetGVR, widget(ns, "r", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Create, "r", 1)
	waitObject(t, dyn, widgetGVR, ns, "r", "create recorded", func(o *unstructured.Unstructured) bool {
		return o != nil && len(o.GetAnnotations()) > 0
	})
	stop()

	runHandler(t, newHandler(), addr)
	j.waitCount(t, sdk.Resume, "r", 1)
	if n := len(j.find(sdk.Create, "r")); n != 1 {
		t.Errorf("create ran %d times, want once", n)
	}
}

// TestRetryThenPermanentFailure: a temporary error is retried with backoff
// (attempts counted up), a permanent one stops delivery and becomes a
// Warning Event on the object; the handling is then recorded as done.
func TestRetryThenPermanentFailure(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	h := sdk.New("flaky", handlerOpts(t)...)
	h.OnCreate(widgets, j.record(func(_ context.Context, ev *sdk.Event) error {
		switch {
		case ev.Attempt == 1:
			return errors.New("first try fails")
		case ev.Attempt == 2:
			return sdk.RetryAfter(errors.New("not yet"), 200*time.Millisecond)
		default:
			return sdk.Permanent(errors.New("cannot ever work"))
		}
	}), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "x", map[string]any{"size": int64(1)}))
	evs := j.waitCount(t, sdk.Create, "x", 3)
	for i, ev := range evs {
		if ev.Attempt != i+1 {
			t.Errorf("delivery %d has attempt %d", i, ev.Attempt)
		}
	}
	if gap := evs[2].Deadline.Sub(evs[1].Deadline); gap < 200*time.Millisecond {
		t.Errorf("RetryAfter(200ms) was not honoured: deliveries %v apart", gap)
	}
	eventually(t, "a HandlerFailed event", func() bool {
		for _, e := range events(t, cp, ns, "x") {
			if e.Reason == "HandlerFailed" && e.Type == "Warning" && strings.Contains(e.Message, "cannot ever work") {
				return true
			}
		}
		return false
	})
	waitObject(t, dyn, widgetGVR, ns, "x", "recorded as handled", func(o *unstructured.Unstructured) bool {
		return o != nil && len(o.GetAnnotations()) > 0
	})
	if n := len(j.find(sdk.Create, "x")); n != 3 {
		t.Errorf("create delivered %d times after a permanent failure, want 3", n)
	}
}
