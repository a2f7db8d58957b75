package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/progress"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/test/controlplane"
)

// scenario drives the handler through one rule of docs/protocol.md; a nil
// error is a pass.
type scenario struct {
	rule  string // the id in docs/protocol.md
	check string // what the scenario does, for the report
	run   func(*kit, context.Context) error
}

// scenarios run in this order: the handshake first, daemon.session with
// the other daemons' (it ends the session, and the next one has the
// broker's window), cap.use after the reconnect (it ends the session, and
// the next one's Welcome lacks handler Events until the window's ends it),
// the window's after it (they end the session, and the handler's smaller
// window would turn reviews away), the backoff's after them (it ends sessions too, and gives back the broker's window),
// conn.keepalive once the handler has connected every way but the last,
// ack.one once every other delivery is done, the drain next (it stops the
// handler), the rejected Hello after it (it starts the handler again), and
// instance.id, which compares the two processes, last.
var scenarios = []scenario{
	{"stream.hello", "the first message is a Hello the broker welcomes", (*kit).hello},
	{"cap.list", "the Hello lists its capabilities with CAPABILITY_CAPABILITIES", (*kit).capabilities},
	{"ack.ok", "create (scenario ok) is acked OK and its result stored", (*kit).ackOK},
	{"ack.retry", "create (scenario retry) is acked RETRY with retry_after 1s, sent again no sooner, then OK", (*kit).ackRetry},
	{"ack.fail", "create (scenario fail) is acked FAIL, becomes a HandlerFailed Event and is not sent again", (*kit).ackFail},
	{"ack.patch", "create (scenario patch) is acked OK with a patch and a status patch, both written", (*kit).ackPatch},
	{"cancel", "create (scenario slow) cancelled as it runs, as the broker cancels: still acked", (*kit).cancel},
	{"hold.delete", "delete is delivered while the hold is on, acked OK, then the hold goes", (*kit).holdDelete},
	{"timer.tick", "tick (label timer) ticks, each tick interval after the last one's ack", (*kit).timerTicks},
	{"timer.ack", "a tick's OK writes its result; deleted, the ticking widget goes", (*kit).timerAck},
	{"daemon.start", "daemon (label daemon) is started and acked OK while it runs", (*kit).daemonStart},
	{"daemon.stop", "deleted, its daemon's stop is acked once it returned, within its cancellation timeout", (*kit).daemonStop},
	{"daemon.exited", "daemon (label daemon, scenario exit) returns by itself: DaemonExited names it, not failed", (*kit).daemonExited},
	{"daemon.session", "daemon (label daemon, scenario session) beats while it runs; the kit ends its session: the beats stop within 2s, and it starts again on the next one", (*kit).daemonSession},
	{"admission.answer", "validate (label admission) refuses scenario deny with its message, allows the rest", (*kit).admissionAnswer},
	{"admission.patch", "mutate (label admission) patches scenario mutate's labels as it is created", (*kit).admissionPatch},
	{"limits.answer", "create (scenario big) would answer over 4 MiB: acked FAIL, the stream kept", (*kit).oversizedAnswer},
	{"conn.receive", "a create of scenario ok just under 32 MiB is taken and acked OK", (*kit).largeDelivery},
	{"status.retry", "the broker restarts: the handler connects again and gets deliveries", (*kit).reconnect},
	{"cap.use", "create (scenario events) posts an Event: its ack carries it; on a fresh session whose Welcome lists capabilities without CAPABILITY_HANDLER_EVENTS, it carries none, and both are OK", (*kit).capUse},
	{"window.bound", "on a fresh session whose Welcome says a window of 1, two slow creates sent at once: the handler holds one at a time", (*kit).windowBound},
	{"window.over", "the create sent while its window was full is acked RETRY, and later OK", (*kit).windowOver},
	{"reconnect.backoff", "the session ended and 3 attempts refused Unavailable: the delays grow, stay under 5s, and reset after a Welcome", (*kit).reconnectBackoff},
	{"conn.new", "each session so far came on a new connection (address)", (*kit).connNew},
	{"conn.keepalive", "the proxy enforces the broker's keepalive policy; the session held idle 5s: no connection was told GOAWAY (too_many_pings)", (*kit).connKeepalive},
	{"delivery.batch", "a handler whose Hello lists CAPABILITY_DELIVERY_BATCH acks each delivery of a batch of two, for an undeclared binding, FAIL", (*kit).deliveryBatch},
	{"ack.one", "a delivery for an undeclared binding is acked FAIL; no delivery acked twice or unsent, none left unanswered", (*kit).ackOne},
	{"drain.goodbye", "on SIGTERM, a create held (scenario held), the handler says Goodbye, the stream ends OK and it exits 0", (*kit).drain},
	{"drain.handback", "the delivery the kit sent after the Goodbye is acked RETRY", (*kit).drainHandback},
	{"status.permanent", "started again, its Hello refused with InvalidArgument: it exits non-zero, connecting once", (*kit).rejectedHello},
	{"instance.id", "the first process kept one instance_id on every stream; the second one took another", (*kit).instanceID},
}

const (
	patchedLabel    = "conformance.tether.dev/patched"
	patchedPhase    = "Patched"
	retryAfter      = time.Second
	failMessage     = "conformance: permanent failure"
	quietAfterFail  = 2 * time.Second // the broker's backoff here is 100 ms: a retry would come well within this
	retryEarlySlack = 100 * time.Millisecond
)

func (k *kit) hello(ctx context.Context) error {
	var s *stream
	if !k.wire.await(ctx, waitFor, func() bool {
		for _, x := range k.wire.streams {
			if x.first != nil && (x.welcome != nil || x.ended) {
				s = x
				return true
			}
		}
		return false
	}) {
		return errors.New("no stream with a first message and the broker's answer")
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	h := s.first.GetHello()
	switch {
	case h == nil:
		return fmt.Errorf("the first message is %T, not a Hello", s.first.GetMessage())
	case s.welcome == nil:
		return fmt.Errorf("the broker refused the Hello: %s: %s", s.endStatus.Code(), s.endStatus.Message())
	case h.GetHandler() != handlerName:
		return fmt.Errorf("Hello.handler is %q, not $%s (%q)", h.GetHandler(), envHandler, handlerName)
	case h.GetProtocolVersion() != "" && h.GetProtocolVersion() != "v1":
		return fmt.Errorf("Hello.protocol_version is %q", h.GetProtocolVersion())
	}
	return nil
}

func (k *kit) capabilities(ctx context.Context) error {
	h := k.firstHello()
	if h == nil {
		return errors.New("no Hello")
	}
	if !slices.Contains(h.GetCapabilities(), tetherv1.Capability_CAPABILITY_CAPABILITIES) {
		return fmt.Errorf("Hello.capabilities = %v, without CAPABILITY_CAPABILITIES", h.GetCapabilities())
	}
	return nil
}

func (k *kit) ackOK(ctx context.Context) error {
	if err := k.createWidget(ctx, "ok", "ok"); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, "ok", tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, 1)
	if err != nil {
		return err
	}
	if got := acks[0].a.GetOutcome(); got != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("create acked %v (%s), want OK", got, acks[0].a.GetMessage())
	}
	return k.awaitResult(ctx, "ok", map[string]any{"scenario": "ok"})
}

func (k *kit) ackRetry(ctx context.Context) error {
	if err := k.createWidget(ctx, "retry", "retry"); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, "retry", tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, 2)
	if err != nil {
		return err
	}
	k.wire.mu.Lock()
	ds, _ := k.wire.exchangesLocked("retry", tetherv1.DeliveryKind_DELIVERY_KIND_CREATE)
	k.wire.mu.Unlock()
	first, second := acks[0].a, acks[1].a
	switch {
	case first.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY:
		return fmt.Errorf("attempt 1 acked %v (%s), want RETRY", first.GetOutcome(), first.GetMessage())
	case first.GetRetryAfter().AsDuration() != retryAfter:
		return fmt.Errorf("attempt 1's retry_after is %v, want %v", first.GetRetryAfter().AsDuration(), retryAfter)
	case ds[1].d.GetAttempt() != 2:
		return fmt.Errorf("the broker sent attempt %d after the RETRY, want 2", ds[1].d.GetAttempt())
	case ds[1].at.Sub(acks[0].at) < retryAfter-retryEarlySlack:
		return fmt.Errorf("attempt 2 came %v after the RETRY, sooner than its retry_after %v", ds[1].at.Sub(acks[0].at), retryAfter)
	case second.GetOutcome() != tetherv1.Outcome_OUTCOME_OK:
		return fmt.Errorf("attempt 2 acked %v (%s), want OK", second.GetOutcome(), second.GetMessage())
	}
	return k.awaitResult(ctx, "retry", map[string]any{"attempt": float64(2)})
}

func (k *kit) ackFail(ctx context.Context) error {
	if err := k.createWidget(ctx, "fail", "fail"); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, "fail", tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, 1)
	if err != nil {
		return err
	}
	if a := acks[0].a; a.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || a.GetMessage() != failMessage {
		return fmt.Errorf("create acked %v (%q), want FAIL (%q)", a.GetOutcome(), a.GetMessage(), failMessage)
	}
	if err := k.poll(ctx, "a HandlerFailed Event naming the message", func(ctx context.Context) (bool, error) {
		list, err := k.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=fail"})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(e corev1.Event) bool {
			return e.Reason == "HandlerFailed" && e.Type == "Warning" && strings.Contains(e.Message, failMessage)
		}), nil
	}); err != nil {
		return err
	}
	// Nothing to wait for but time: a FAIL is not sent again, and the
	// broker's backoff here would send a retry well within quietAfterFail.
	if k.wire.await(ctx, quietAfterFail, func() bool {
		ds, _ := k.wire.exchangesLocked("fail", tetherv1.DeliveryKind_DELIVERY_KIND_CREATE)
		return len(ds) > 1
	}) {
		return errors.New("the broker sent the create again after FAIL")
	}
	return nil
}

func (k *kit) ackPatch(ctx context.Context) error {
	if err := k.createWidget(ctx, "patch", "patch"); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, "patch", tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, 1)
	if err != nil {
		return err
	}
	if got := acks[0].a.GetOutcome(); got != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("create acked %v (%s), want OK", got, acks[0].a.GetMessage())
	}
	return k.awaitWidget(ctx, "patch", "labelled "+patchedLabel+"=yes with status.phase "+patchedPhase, func(o *unstructured.Unstructured) bool {
		phase, _, _ := unstructured.NestedString(o.Object, "status", "phase")
		return o.GetLabels()[patchedLabel] == "yes" && phase == patchedPhase
	})
}

// holdDelete looks at the object when the handler's DELETE ack reaches the
// proxy, before the broker has it: still there, being deleted, still held.
func (k *kit) holdDelete(ctx context.Context) error {
	const name = "held"
	if err := k.createWidget(ctx, name, "ok"); err != nil {
		return err
	}
	if err := k.awaitWidget(ctx, name, "held by the handler", func(o *unstructured.Unstructured) bool { return hold.Has(o, handlerName) }); err != nil {
		return err
	}
	seen := make(chan string, 1) // what the object was at the ack: "" when as it must be
	k.wire.mu.Lock()
	k.wire.beforeAck = func(d *tetherv1.Delivery, _ *tetherv1.Ack) {
		if d.GetKind() != tetherv1.DeliveryKind_DELIVERY_KIND_DELETE || d.GetRef().GetName() != name {
			return
		}
		o, err := k.widgets().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			seen <- fmt.Sprintf("not readable when the handler acked the delete: %v", err)
		case o.GetDeletionTimestamp() == nil:
			seen <- "not being deleted when its delete was delivered"
		case !hold.Has(o, handlerName):
			seen <- "released before the handler acked the delete"
		default:
			seen <- ""
		}
	}
	k.wire.mu.Unlock()
	if err := k.widgets().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the widget: %w", err)
	}
	acks, err := k.awaitAcks(ctx, name, tetherv1.DeliveryKind_DELIVERY_KIND_DELETE, 1)
	if err != nil {
		return err
	}
	if got := acks[0].a.GetOutcome(); got != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("delete acked %v (%s), want OK", got, acks[0].a.GetMessage())
	}
	if why := <-seen; why != "" {
		return errors.New("the widget was " + why)
	}
	return k.poll(ctx, "the widget gone once the delete was acked", func(ctx context.Context) (bool, error) {
		_, err := k.widgets().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// firstHello is the first stream's Hello; nil before one came.
func (k *kit) firstHello() *tetherv1.Hello {
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	for _, s := range k.wire.streams {
		if s.hello != nil {
			return s.hello
		}
	}
	return nil
}

// awaitAcks waits for n deliveries of kind for the widget name, all acked.
func (k *kit) awaitAcks(ctx context.Context, name string, kind tetherv1.DeliveryKind, n int) ([]ackAt, error) {
	var acks []ackAt
	ok := k.wire.await(ctx, waitFor, func() bool {
		_, all := k.wire.exchangesLocked(name, kind)
		if len(all) < n || slices.ContainsFunc(all[:n], func(a ackAt) bool { return a.a == nil }) {
			return false
		}
		acks = all[:n]
		return true
	})
	if !ok {
		return nil, fmt.Errorf("no %d acked %v deliveries for widget %s within %v", n, kind, name, waitFor)
	}
	return acks, nil
}

func (k *kit) widgets() dynamic.ResourceInterface {
	return k.dyn.Resource(controlplane.WidgetGVR).Namespace(namespace)
}

// createWidget creates the widget name with spec.scenario and, given a
// label key, that label set to "yes" (which the timer, daemon and admission
// bindings select on).
func (k *kit) createWidget(ctx context.Context, name, scenario string, label ...string) error {
	_, err := k.widgets().Create(ctx, widget(name, scenario, label...), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the widget %s: %w", name, err)
	}
	return nil
}

func widget(name, scenario string, label ...string) *unstructured.Unstructured {
	labels := map[string]any{}
	for _, l := range label {
		labels[l] = "yes"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "labels": labels},
		"spec":     map[string]any{"scenario": scenario},
	}}
}

// awaitResult waits for the create binding's result on the widget.
func (k *kit) awaitResult(ctx context.Context, name string, want map[string]any) error {
	return k.awaitBindingResult(ctx, name, "create", want)
}

// awaitBindingResult waits for the result of the binding id on the widget.
func (k *kit) awaitBindingResult(ctx context.Context, name, id string, want map[string]any) error {
	var got string
	err := k.awaitWidget(ctx, name, fmt.Sprintf("the %s result %v", id, want), func(o *unstructured.Unstructured) bool {
		got = o.GetAnnotations()[progress.ResultKey(handlerName, id)]
		var v map[string]any
		return json.Unmarshal([]byte(got), &v) == nil && reflect.DeepEqual(v, want)
	})
	if err != nil && got != "" {
		return fmt.Errorf("%w (the stored result is %s)", err, got)
	}
	return err
}

func (k *kit) awaitWidget(ctx context.Context, name, what string, cond func(*unstructured.Unstructured) bool) error {
	return k.poll(ctx, "widget "+name+" "+what, func(ctx context.Context) (bool, error) {
		o, err := k.widgets().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cond(o), nil
	})
}

// poll checks cond every 50 ms until it holds or waitFor passes.
func (k *kit) poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, waitFor, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("no %s within %v: %w", what, waitFor, last)
		}
		return fmt.Errorf("no %s within %v", what, waitFor)
	}
	return nil
}
