package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestABindingInBackoffDoesNotHoldUpTheOthers: while one binding of an
// object keeps asking to be retried, the handler's other bindings of that
// object are delivered meanwhile: a Widget is created, then deleted, and
// every other binding is done with it (the delete releasing the hold, so
// the Widget goes) before the failing binding recovers, if it ever does.
func TestABindingInBackoffDoesNotHoldUpTheOthers(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	tests := []struct {
		name string
		// bind registers the bindings: fail is the failing binding's
		// function, ok the others'.
		bind func(h *sdk.Handler, ns string, fail, ok sdk.Func)
		// failing is the failing binding's id, and fails says which of
		// its calls fail; early: it is retried before the delete.
		failing string
		fails   func(*sdk.Event) bool
		early   bool
		// created are the other bindings done before the delete; deleted
		// those done after it.
		created, deleted []string
	}{{
		name: "a failing event binding",
		bind: func(h *sdk.Handler, ns string, fail, ok sdk.Func) {
			h.OnEvent(widgets, fail, sdk.ID("event"), sdk.Namespaces(ns))
			h.OnCreate(widgets, ok, sdk.ID("create"), sdk.Namespaces(ns))
			h.OnDelete(widgets, ok, sdk.ID("delete"), sdk.Namespaces(ns))
		},
		failing: "event", fails: always, early: true,
		created: []string{"create"}, deleted: []string{"delete"},
	}, {
		// The hold goes on at once when the create is retried, so the
		// delete still runs (README, the hold contract).
		name: "a failing create binding",
		bind: func(h *sdk.Handler, ns string, fail, ok sdk.Func) {
			h.OnCreate(widgets, fail, sdk.ID("create"), sdk.Namespaces(ns))
			h.OnDelete(widgets, ok, sdk.ID("delete"), sdk.Namespaces(ns))
		},
		failing: "create", fails: always, early: true,
		deleted: []string{"delete"},
	}, {
		name: "a failing create binding beside another create binding",
		bind: func(h *sdk.Handler, ns string, fail, ok sdk.Func) {
			h.OnCreate(widgets, fail, sdk.ID("create-a"), sdk.Namespaces(ns))
			h.OnCreate(widgets, ok, sdk.ID("create-b"), sdk.Namespaces(ns))
			h.OnDelete(widgets, ok, sdk.ID("delete"), sdk.Namespaces(ns))
		},
		failing: "create-a", fails: always, early: true,
		created: []string{"create-b"}, deleted: []string{"delete"},
	}, {
		name: "a delete binding that fails a few times beside another delete binding",
		bind: func(h *sdk.Handler, ns string, fail, ok sdk.Func) {
			h.OnDelete(widgets, fail, sdk.ID("delete-a"), sdk.Namespaces(ns))
			h.OnDelete(widgets, ok, sdk.ID("delete-b"), sdk.Namespaces(ns))
		},
		failing: "delete-a", fails: firstAttempts(3),
		deleted: []string{"delete-b"},
	}, {
		// The deletion is a MODIFIED event before it is the delete's
		// cause: a held Widget stayed Terminating while it was retried.
		name: "an event binding that fails once the Widget is being deleted",
		bind: func(h *sdk.Handler, ns string, fail, ok sdk.Func) {
			h.OnEvent(widgets, fail, sdk.ID("event"), sdk.Namespaces(ns))
			h.OnCreate(widgets, ok, sdk.ID("create"), sdk.Namespaces(ns))
			h.OnDelete(widgets, ok, sdk.ID("delete"), sdk.Namespaces(ns))
		},
		failing: "event", fails: func(ev *sdk.Event) bool { return ev.Object().GetDeletionTimestamp() != nil },
		created: []string{"create"}, deleted: []string{"delete"},
	}}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := cp.Namespace(t)
			addr := startBroker(t, cp)
			var tr trials
			h := sdk.New(fmt.Sprintf("backoff-%d", i), handlerOpts(t)...)
			tc.bind(h, ns, tr.fn(tc.fails), tr.fn(never))
			runHandler(t, h, addr)

			create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
			waitObject(t, dyn, widgetGVR, ns, "w", "held", func(o *unstructured.Unstructured) bool {
				return o != nil && hold.Has(o, h.Name())
			})
			for _, id := range tc.created {
				eventually(t, id+" done with the new Widget", func() bool { return tr.succeeded(id) >= 0 })
			}
			if tc.early {
				eventually(t, tc.failing+" retried", func() bool { return tr.attempts(tc.failing) >= 2 })
			}
			del(t, dyn, widgetGVR, ns, "w")
			for _, id := range tc.deleted {
				eventually(t, id+" done with the deleted Widget", func() bool { return tr.succeeded(id) >= 0 })
			}
			waitObject(t, dyn, widgetGVR, ns, "w", "gone", gone)
			if tr.failures(tc.failing) == 0 {
				t.Fatalf("%s never failed", tc.failing)
			}
			recovered := tr.recovered(tc.failing)
			for _, id := range append(tc.created, tc.deleted...) {
				if done := tr.succeeded(id); recovered >= 0 && recovered < done {
					t.Errorf("%s was done only after %s recovered: it waited for the failing binding", id, tc.failing)
				}
			}
		})
	}
}

// trials records the calls of a handler's functions, in order.
type trials struct {
	mu  sync.Mutex
	log []trial
}

type trial struct {
	binding string
	ok      bool
}

func always(*sdk.Event) bool { return true }

func never(*sdk.Event) bool { return false }

func firstAttempts(n int) func(*sdk.Event) bool {
	return func(ev *sdk.Event) bool { return ev.Attempt <= n }
}

// fn is a function that fails the calls fails says, and records each call.
func (tr *trials) fn(fails func(*sdk.Event) bool) sdk.Func {
	return func(_ context.Context, ev *sdk.Event) error {
		ok := !fails(ev)
		tr.mu.Lock()
		tr.log = append(tr.log, trial{binding: ev.Binding, ok: ok})
		tr.mu.Unlock()
		if !ok {
			return fmt.Errorf("attempt %d of %s fails", ev.Attempt, ev.Binding)
		}
		return nil
	}
}

// attempts counts the calls of binding id.
func (tr *trials) attempts(id string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.log {
		if c.binding == id {
			n++
		}
	}
	return n
}

// failures counts the failed calls of binding id.
func (tr *trials) failures(id string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.log {
		if c.binding == id && !c.ok {
			n++
		}
	}
	return n
}

// recovered is the place in the log of binding id's first success after
// its first failure, or -1.
func (tr *trials) recovered(id string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	failed := false
	for i, c := range tr.log {
		switch {
		case c.binding != id:
		case !c.ok:
			failed = true
		case failed:
			return i
		}
	}
	return -1
}

// succeeded is the place in the log of binding id's first success, or -1.
func (tr *trials) succeeded(id string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, c := range tr.log {
		if c.binding == id && c.ok {
			return i
		}
	}
	return -1
}
