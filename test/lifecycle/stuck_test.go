package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestAStuckHoldSaysWhyItStays: with --stuck-after 2s, two widgets are held
// in their deletion past it. One's handler is connected and its delete
// binding keeps asking to be retried; the other's handler has a STRICT
// delete binding and is gone past its grace. Each widget gets a HoldStuck
// Event that names the handler, the binding and why the hold stays;
// /metrics counts each handler's stuck hold and its age, and the retrying
// binding; `broker status` lists both objects in the Events' words.
func TestAStuckHoldSaysWhyItStays(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	var brokerNS string
	addr, base := startBrokerWithMetrics(t, cp, func(o *broker.Options) {
		o.StuckAfter = 2 * time.Second
		o.Absence.Grace = time.Second
		brokerNS = o.Namespace
	})
	retryNS, strictNS := cp.Namespace(t), cp.Namespace(t)

	retrying := sdk.New("stuckretry", handlerOpts(t)...)
	retrying.OnDelete(widgets, func(context.Context, *sdk.Event) error {
		return sdk.RetryAfter(errors.New("the bucket is not empty"), 200*time.Millisecond)
	}, sdk.ID("cleanup"), sdk.Namespaces(retryNS), sdk.Retries(-1))
	runHandler(t, retrying, addr)
	strict := sdk.New("stuckstrict", handlerOpts(t)...)
	strict.OnDelete(widgets, nothing, sdk.ID("finish"), sdk.Namespaces(strictNS), sdk.Finalizer(sdk.FinalizerStrict))
	stopStrict := runHandler(t, strict, addr)

	create(t, dyn, widgetGVR, widget(retryNS, "r", nil))
	create(t, dyn, widgetGVR, widget(strictNS, "s", nil))
	for _, w := range []struct{ ns, name, handler string }{{retryNS, "r", "stuckretry"}, {strictNS, "s", "stuckstrict"}} {
		waitObject(t, dyn, widgetGVR, w.ns, w.name, "held", func(o *unstructured.Unstructured) bool {
			return o != nil && hold.Has(o, w.handler)
		})
	}
	stopStrict()
	del(t, dyn, widgetGVR, retryNS, "r")
	del(t, dyn, widgetGVR, strictNS, "s")

	retryWords := "handler present and retrying (binding cleanup, attempt "
	strictWords := "STRICT binding finish with the handler absent"
	for _, c := range []struct{ ns, name, handler, words string }{
		{retryNS, "r", "stuckretry", retryWords},
		{strictNS, "s", "stuckstrict", strictWords},
	} {
		eventually(t, "a HoldStuck Event on "+c.name+" saying "+c.words, func() bool {
			return slices.ContainsFunc(events(t, cp, c.ns, c.name), func(e corev1.Event) bool {
				return e.Reason == "HoldStuck" && e.Type == corev1.EventTypeWarning &&
					strings.Contains(e.Message, `handler "`+c.handler+`"`) && strings.Contains(e.Message, c.words)
			})
		})
	}
	// One Event per reason: the retrying widget's attempts go on, its
	// reason stays.
	n := 0
	for _, e := range events(t, cp, retryNS, "r") {
		if e.Reason == "HoldStuck" {
			n += int(max(e.Count, 1))
		}
	}
	if n != 1 {
		t.Errorf("%d HoldStuck Events on the retrying widget, want 1", n)
	}

	checks := []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
	}{
		{"tether_holds_stuck", map[string]string{"handler": "stuckretry"}, equal(1)},
		{"tether_holds_stuck", map[string]string{"handler": "stuckstrict"}, equal(1)},
		{"tether_hold_stuck_seconds", map[string]string{"handler": "stuckretry"}, atLeast(2)},
		{"tether_hold_stuck_seconds", map[string]string{"handler": "stuckstrict"}, atLeast(2)},
		{"tether_objects_held", map[string]string{"handler": "stuckstrict"}, equal(1)},
		{"tether_binding_retrying", map[string]string{"handler": "stuckretry", "binding": "cleanup"}, equal(1)},
		{"tether_binding_deliveries_total", map[string]string{"handler": "stuckretry", "binding": "cleanup", "outcome": "retry"}, atLeast(2)},
		{"tether_binding_run_seconds", map[string]string{"handler": "stuckretry", "binding": "cleanup"}, atLeast(2)},
		{"tether_queue_wait_seconds", map[string]string{"handler": "stuckretry"}, atLeast(1)},
	}
	var miss string
	t.Cleanup(func() {
		if t.Failed() && miss != "" {
			t.Log("last seen on /metrics: " + miss)
		}
	})
	eventually(t, "the stuck holds on /metrics", func() bool {
		families := metricFamilies(t, base+"/metrics")
		for _, c := range checks {
			if got, found := sumOf(families, c.name, c.labels); !found || !c.ok(got) {
				miss = fmt.Sprintf("%s%v = %v (found %v)", c.name, c.labels, got, found)
				return false
			}
		}
		return true
	})

	var out string
	eventually(t, "broker status to list both stuck widgets with why", func() bool {
		o, err := exec.Command(brokerBinary(t), "status", "--kubeconfig", cp.KubeconfigPath(), "--namespace", brokerNS).CombinedOutput()
		out = string(o)
		return err == nil &&
			strings.Contains(out, "widgets.test.tether.dev "+retryNS+"/r stuck for ") && strings.Contains(out, retryWords) &&
			strings.Contains(out, "widgets.test.tether.dev "+strictNS+"/s stuck for ") && strings.Contains(out, strictWords)
	})
	t.Logf("broker status:\n%s", out)
}

// TestAStuckHoldNamesEachReason: besides a retrying binding and an absent
// STRICT handler (TestAStuckHoldSaysWhyItStays), a hold on an object being
// deleted stays while its handler is absent within its grace, while its
// delete binding has not answered yet, and while the API server refuses the
// broker's release. Each widget past --stuck-after gets a HoldStuck Event in
// the words of its reason, and `broker status` lists it with the same words.
// (The one reason left, no broker leading, is cmd/broker's unit test: status
// says it only after 30 s without a renewal.)
func TestAStuckHoldNamesEachReason(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	var brokerNS string
	addr := startBroker(t, cp, func(o *broker.Options) {
		o.StuckAfter = 2 * time.Second
		brokerNS = o.Namespace
	})
	graceNS, busyNS, refuseNS := cp.Namespace(t), cp.Namespace(t), cp.Namespace(t)

	away := sdk.New("stuckaway", append(handlerOpts(t), sdk.WithGrace(time.Hour))...)
	away.OnDelete(widgets, nothing, sdk.ID("cleanup"), sdk.Namespaces(graceNS))
	stopAway := runHandler(t, away, addr)
	busy := sdk.New("stuckbusy", handlerOpts(t)...)
	busy.OnDelete(widgets, func(ctx context.Context, _ *sdk.Event) error {
		<-ctx.Done() // answers only when the test ends
		return ctx.Err()
	}, sdk.ID("drain"), sdk.Namespaces(busyNS), sdk.Timeout(30*time.Minute))
	runHandler(t, busy, addr)
	done := sdk.New("stuckrefused", handlerOpts(t)...)
	done.OnDelete(widgets, nothing, sdk.ID("finish"), sdk.Namespaces(refuseNS))
	runHandler(t, done, addr)

	frozen := widget(refuseNS, "f", nil)
	frozen.SetLabels(map[string]string{"frozen": "yes"})
	create(t, dyn, widgetGVR, widget(graceNS, "g", nil))
	create(t, dyn, widgetGVR, widget(busyNS, "b", nil))
	create(t, dyn, widgetGVR, frozen)
	for _, w := range []struct{ ns, name, handler string }{{graceNS, "g", "stuckaway"}, {busyNS, "b", "stuckbusy"}, {refuseNS, "f", "stuckrefused"}} {
		waitObject(t, dyn, widgetGVR, w.ns, w.name, "held", func(o *unstructured.Unstructured) bool {
			return o != nil && hold.Has(o, w.handler)
		})
	}
	// From now on the API server refuses every write to the frozen widget:
	// the release after its delete binding answers too.
	denyLabel(t, cp, refuseNS, "frozen")
	stopAway()
	for _, w := range []struct{ ns, name string }{{graceNS, "g"}, {busyNS, "b"}, {refuseNS, "f"}} {
		del(t, dyn, widgetGVR, w.ns, w.name)
	}

	cases := []struct{ ns, name, handler, words string }{
		{graceNS, "g", "stuckaway", "handler absent within its grace"},
		{busyNS, "b", "stuckbusy", "handler present, binding drain has not answered yet"},
		{refuseNS, "f", "stuckrefused", "write refused: the API server refuses the broker's write to the object"},
	}
	for _, c := range cases {
		eventually(t, "a HoldStuck Event on "+c.name+" saying "+c.words, func() bool {
			return slices.ContainsFunc(events(t, cp, c.ns, c.name), func(e corev1.Event) bool {
				return e.Reason == "HoldStuck" && e.Type == corev1.EventTypeWarning &&
					strings.Contains(e.Message, `handler "`+c.handler+`"`) && strings.Contains(e.Message, c.words)
			})
		})
	}
	var out string
	eventually(t, "broker status to list the three stuck widgets with why", func() bool {
		o, err := exec.Command(brokerBinary(t), "status", "--kubeconfig", cp.KubeconfigPath(), "--namespace", brokerNS).CombinedOutput()
		out = string(o)
		if err != nil {
			return false
		}
		for _, c := range cases {
			if !strings.Contains(out, "widgets.test.tether.dev "+c.ns+"/"+c.name+" stuck for ") || !strings.Contains(out, c.words) {
				return false
			}
		}
		return true
	})
	t.Logf("broker status:\n%s", out)
}
