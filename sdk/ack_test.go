package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// handleOne runs fn as a create binding for one delivery and returns the ack.
func handleOne(t *testing.T, fn sdk.Func, d *tetherv1.Delivery, register ...func(*sdk.Handler, sdk.Func)) *tetherv1.Ack {
	t.Helper()
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options()...)
	if len(register) == 0 {
		h.OnCreate(configMaps, fn)
	}
	for _, r := range register {
		r(h, fn)
	}
	hs.run(h)
	s := hs.session()
	s.deliver(t, d)
	return s.ack(t)
}

func jsonEqual(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %q", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func TestOKAckCarriesPatchesAndResult(t *testing.T) {
	ack := handleOne(t, func(_ context.Context, ev *sdk.Event) error {
		ev.SetLabel("team", "web")
		ev.RemoveLabel("stale")
		ev.SetAnnotation("example.com/seen", "yes")
		ev.RemoveAnnotation("example.com/old")
		ev.Patch(map[string]any{"spec": map[string]any{"paused": true, "replicas": 1}})
		ev.Patch(map[string]any{"spec": map[string]any{"replicas": 3}})
		ev.PatchStatus(map[string]any{"phase": "Ready"})
		ev.SetResult(map[string]any{"copies": 2})
		return nil
	}, delivery("d1"))

	if ack.GetDeliveryId() != "d1" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Fatalf("ack = %v, want OK for d1", ack)
	}
	jsonEqual(t, "patch", ack.GetPatch(), `{
		"metadata": {"labels": {"team": "web", "stale": null},
		             "annotations": {"example.com/seen": "yes", "example.com/old": null}},
		"spec": {"paused": true, "replicas": 3}}`)
	jsonEqual(t, "status_patch", ack.GetStatusPatch(), `{"phase": "Ready"}`)
	jsonEqual(t, "result", ack.GetResult(), `{"copies": 2}`)
	if ack.GetMessage() != "" || ack.GetRetryAfter() != nil {
		t.Errorf("OK ack has message %q, retry_after %v", ack.GetMessage(), ack.GetRetryAfter())
	}
}

func TestOKAckWithoutChangesCarriesNoPatch(t *testing.T) {
	ack := handleOne(t, noop, delivery("d1"))
	if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || ack.Patch != nil || ack.StatusPatch != nil || ack.Result != nil {
		t.Fatalf("ack = %v, want a bare OK", ack)
	}
}

func TestReturnedErrorsChooseTheOutcome(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name        string
		fn          sdk.Func
		outcome     tetherv1.Outcome
		message     string
		retryAfter  time.Duration
		wantNoPatch bool
	}{
		{name: "nil is OK", fn: noop, outcome: tetherv1.Outcome_OUTCOME_OK},
		{name: "plain error retries with the binding backoff",
			fn:      func(context.Context, *sdk.Event) error { return boom },
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "boom"},
		{name: "RetryAfter retries after the delay",
			fn:      func(context.Context, *sdk.Event) error { return sdk.RetryAfter(boom, 5*time.Second) },
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "boom", retryAfter: 5 * time.Second},
		{name: "wrapped RetryAfter still sets the delay",
			fn: func(context.Context, *sdk.Event) error {
				return fmt.Errorf("syncing: %w", sdk.RetryAfter(boom, time.Minute))
			},
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "syncing: boom", retryAfter: time.Minute},
		{name: "RetryAfter without error polls",
			fn:      func(context.Context, *sdk.Event) error { return sdk.RetryAfter(nil, 2*time.Second) },
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "retry requested after 2s", retryAfter: 2 * time.Second},
		{name: "Permanent fails",
			fn:      func(context.Context, *sdk.Event) error { return sdk.Permanent(boom) },
			outcome: tetherv1.Outcome_OUTCOME_FAIL, message: "boom"},
		{name: "wrapped Permanent fails",
			fn:      func(context.Context, *sdk.Event) error { return fmt.Errorf("bad spec: %w", sdk.Permanent(boom)) },
			outcome: tetherv1.Outcome_OUTCOME_FAIL, message: "bad spec: boom"},
		{name: "outermost marker wins",
			fn:      func(context.Context, *sdk.Event) error { return sdk.RetryAfter(sdk.Permanent(boom), time.Second) },
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "boom", retryAfter: time.Second},
		{name: "Permanent of nil is OK",
			fn:      func(context.Context, *sdk.Event) error { return sdk.Permanent(nil) },
			outcome: tetherv1.Outcome_OUTCOME_OK},
		{name: "panic retries and does not crash",
			fn:      func(context.Context, *sdk.Event) error { panic("nil map") },
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "panic: nil map"},
		{name: "patches are dropped on error",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.SetLabel("a", "b")
				ev.SetResult("r")
				return boom
			},
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "boom", wantNoPatch: true},
		{name: "unencodable result fails",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.SetResult(make(chan int))
				return nil
			},
			outcome: tetherv1.Outcome_OUTCOME_FAIL, message: "encoding result"},
		{name: "a result past the limit fails",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.SetResult(strings.Repeat("x", tetherv1.MaxResultBytes))
				return nil
			},
			outcome: tetherv1.Outcome_OUTCOME_FAIL, message: "encoding result: the result is 16386 bytes of JSON, more than the 16384"},
		{name: "long messages are cut",
			fn: func(context.Context, *sdk.Event) error {
				return errors.New(strings.Repeat("é", 2000))
			},
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: strings.Repeat("é", 510) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ack := handleOne(t, tt.fn, delivery("d1"))
			if ack.GetOutcome() != tt.outcome {
				t.Fatalf("outcome = %v (message %q), want %v", ack.GetOutcome(), ack.GetMessage(), tt.outcome)
			}
			if !strings.HasPrefix(ack.GetMessage(), tt.message) || (tt.message == "" && ack.GetMessage() != "") {
				t.Errorf("message = %q, want it to start with %q", ack.GetMessage(), tt.message)
			}
			if len(ack.GetMessage()) > 1024 {
				t.Errorf("message is %d bytes, want at most 1024", len(ack.GetMessage()))
			}
			if got := ack.GetRetryAfter().AsDuration(); got != tt.retryAfter {
				t.Errorf("retry_after = %s, want %s", got, tt.retryAfter)
			}
			if tt.wantNoPatch && (ack.Patch != nil || ack.Result != nil) {
				t.Errorf("failed ack carries patch %s, result %s", ack.Patch, ack.Result)
			}
		})
	}
}

func TestDeliveriesThisSDKCannotHandleAreFailed(t *testing.T) {
	onTimer := func(h *sdk.Handler, fn sdk.Func) { h.OnTimer(configMaps, time.Second, fn) }
	onDaemon := func(h *sdk.Handler, fn sdk.Func) { h.OnDaemon(configMaps, fn) }
	tests := []struct {
		name     string
		mod      func(*tetherv1.Delivery)
		register func(*sdk.Handler, sdk.Func) // default: a create binding
		want     string
	}{
		{name: "admission review for a create binding", mod: func(d *tetherv1.Delivery) { d.Kind = tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION },
			want: `binding "create-0" is a create binding; it does not take DELIVERY_KIND_ADMISSION deliveries`},
		{name: "kind from a future broker", mod: func(d *tetherv1.Delivery) { d.Kind = 99 },
			want: "not supported by this SDK"},
		{name: "undeclared binding", mod: func(d *tetherv1.Delivery) { d.BindingId = "other" },
			want: `binding "other" is not declared`},
		{name: "malformed object", mod: func(d *tetherv1.Delivery) { d.Object = []byte(`{"metadata":`) },
			want: "malformed delivery"},
		{name: "object that is not a JSON object", mod: func(d *tetherv1.Delivery) { d.Object = []byte(` [1]`) },
			want: "malformed delivery: object: not a JSON object"},
		{name: "malformed old object", mod: func(d *tetherv1.Delivery) { d.OldObject = []byte(`{"spec":}`) },
			want: "malformed delivery: old object"},
		{name: "tick for a create binding", mod: func(d *tetherv1.Delivery) { d.Kind = tetherv1.DeliveryKind_DELIVERY_KIND_TICK },
			want: `binding "create-0" is a create binding; it does not take DELIVERY_KIND_TICK deliveries`},
		{name: "daemon start for a create binding",
			mod:  func(d *tetherv1.Delivery) { d.Kind = tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START },
			want: `binding "create-0" is a create binding; it does not take DELIVERY_KIND_DAEMON_START deliveries`},
		{name: "create for a timer binding", register: onTimer,
			mod:  func(d *tetherv1.Delivery) { d.BindingId = "timer-0" },
			want: `binding "timer-0" is a timer binding; it does not take DELIVERY_KIND_CREATE deliveries`},
		{name: "daemon stop for a timer binding", register: onTimer,
			mod: func(d *tetherv1.Delivery) {
				d.BindingId, d.Kind = "timer-0", tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP
			},
			want: `binding "timer-0" is a timer binding; it does not take DELIVERY_KIND_DAEMON_STOP deliveries`},
		{name: "tick for a daemon binding", register: onDaemon,
			mod:  func(d *tetherv1.Delivery) { d.BindingId, d.Kind = "daemon-0", tetherv1.DeliveryKind_DELIVERY_KIND_TICK },
			want: `binding "daemon-0" is a daemon binding; it does not take DELIVERY_KIND_TICK deliveries`},
		{name: "daemon start without uid", register: onDaemon,
			mod: func(d *tetherv1.Delivery) {
				d.BindingId, d.Kind = "daemon-0", tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START
				d.Ref.Uid = ""
			},
			want: "daemon start without object uid"},
		{name: "daemon start with a malformed object", register: onDaemon,
			mod: func(d *tetherv1.Delivery) {
				d.BindingId, d.Kind = "daemon-0", tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START
				d.Object = []byte(`[`)
			},
			want: "malformed delivery"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := make(chan struct{}, 1)
			var register []func(*sdk.Handler, sdk.Func)
			if tt.register != nil {
				register = append(register, tt.register)
			}
			ack := handleOne(t, func(context.Context, *sdk.Event) error {
				called <- struct{}{}
				return nil
			}, delivery("d1", tt.mod), register...)
			if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || !strings.Contains(ack.GetMessage(), tt.want) {
				t.Fatalf("ack = %v, want FAIL containing %q", ack, tt.want)
			}
			select {
			case <-called:
				t.Error("the handler function was called")
			default:
			}
		})
	}
}

func TestEventCarriesTheDelivery(t *testing.T) {
	deadline := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	type seen struct {
		ev       *sdk.Event
		deadline time.Time
	}
	got := make(chan seen, 1)
	capture := func(ctx context.Context, ev *sdk.Event) error {
		dl, _ := ctx.Deadline()
		got <- seen{ev, dl}
		return nil
	}
	d := delivery("d9", func(d *tetherv1.Delivery) {
		d.Kind = tetherv1.DeliveryKind_DELIVERY_KIND_UPDATE
		d.BindingId = "update-0"
		d.Attempt = 3
		d.Deadline = timestamppb.New(deadline)
		d.Object = []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"default","labels":{"a":"2"}},"data":{"n":"1"}}`)
		d.OldObject = []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"a":"1"}},"data":{"n":"1"}}`)
		d.Diff = []*tetherv1.DiffEntry{
			{Operation: tetherv1.DiffEntry_OPERATION_CHANGE, Path: []string{"metadata", "labels", "a"},
				OldValue: []byte(`"1"`), NewValue: []byte(`"2"`)},
			{Operation: tetherv1.DiffEntry_OPERATION_ADD, Path: []string{"spec", "replicas"}, NewValue: []byte(`3`)},
		}
	})
	ack := handleOne(t, capture, d, func(h *sdk.Handler, fn sdk.Func) { h.OnUpdate(configMaps, fn) })
	if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Fatalf("ack = %v", ack)
	}
	s := recv(t, got, "the event")
	ev := s.ev
	if ev.Kind != sdk.Update || ev.ID != "d9" || ev.Binding != "update-0" || ev.Attempt != 3 {
		t.Errorf("event header = %v %q %q %d", ev.Kind, ev.ID, ev.Binding, ev.Attempt)
	}
	wantRes := sdk.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap"}
	if ev.Resource != wantRes || ev.Namespace != "default" || ev.Name != "cm-d9" || ev.UID != "uid-d9" || ev.ResourceVersion != "7" {
		t.Errorf("event ref = %+v %q/%q %q rv %q", ev.Resource, ev.Namespace, ev.Name, ev.UID, ev.ResourceVersion)
	}
	if !s.deadline.Equal(deadline) || !ev.Deadline.Equal(deadline) {
		t.Errorf("deadline: ctx %s, event %s; want %s", s.deadline, ev.Deadline, deadline)
	}
	if ev.Object().GetLabels()["a"] != "2" || ev.Old().GetLabels()["a"] != "1" {
		t.Errorf("object labels %v, old labels %v", ev.Object().GetLabels(), ev.Old().GetLabels())
	}
	wantDiff := []sdk.Change{
		{Op: "change", Path: []string{"metadata", "labels", "a"}, Old: "1", New: "2"},
		{Op: "add", Path: []string{"spec", "replicas"}, New: int64(3)},
	}
	if !reflect.DeepEqual(ev.Diff, wantDiff) {
		t.Errorf("diff = %#v, want %#v", ev.Diff, wantDiff)
	}
}

func TestFieldAndWatchEventsCarryTheirValues(t *testing.T) {
	t.Run("field", func(t *testing.T) {
		got := make(chan *sdk.Event, 1)
		d := delivery("d1", func(d *tetherv1.Delivery) {
			d.Kind, d.BindingId = tetherv1.DeliveryKind_DELIVERY_KIND_FIELD, "field-0"
			d.FieldOld, d.FieldNew = []byte(`2`), []byte(`{"x":1.5}`)
		})
		handleOne(t, func(_ context.Context, ev *sdk.Event) error { got <- ev; return nil }, d,
			func(h *sdk.Handler, fn sdk.Func) { h.OnField(configMaps, "spec.replicas", fn) })
		ev := recv(t, got, "the event")
		if ev.Kind != sdk.Field || ev.FieldOld != int64(2) || !reflect.DeepEqual(ev.FieldNew, map[string]any{"x": 1.5}) {
			t.Errorf("field event = %v, old %#v, new %#v", ev.Kind, ev.FieldOld, ev.FieldNew)
		}
	})
	t.Run("watch", func(t *testing.T) {
		got := make(chan *sdk.Event, 1)
		d := delivery("d1", func(d *tetherv1.Delivery) {
			d.Kind, d.BindingId, d.EventType = tetherv1.DeliveryKind_DELIVERY_KIND_EVENT, "event-0", "DELETED"
		})
		handleOne(t, func(_ context.Context, ev *sdk.Event) error { got <- ev; return nil }, d,
			func(h *sdk.Handler, fn sdk.Func) { h.OnEvent(configMaps, fn) })
		ev := recv(t, got, "the event")
		if ev.Kind != sdk.Watch || ev.WatchType != "DELETED" || ev.Old() != nil || ev.Diff != nil {
			t.Errorf("watch event = %v %q old %v diff %v", ev.Kind, ev.WatchType, ev.Old(), ev.Diff)
		}
	})
}

// TestAnswerOverTheMessageLimitFailsTheDelivery: an answer the broker
// cannot take in one message would end the session, and the broker would
// send the delivery again; the SDK fails the delivery instead, saying why,
// and the session goes on.
func TestAnswerOverTheMessageLimitFailsTheDelivery(t *testing.T) {
	ack := handleOne(t, func(_ context.Context, ev *sdk.Event) error {
		ev.Patch(map[string]any{"spec": map[string]any{"blob": strings.Repeat("x", tetherv1.DefaultMaxMessageBytes)}})
		return nil
	}, delivery("d1"))
	if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || !strings.Contains(ack.GetMessage(), "more than the 4194304 the broker takes") {
		t.Fatalf("ack %v %q, want FAIL saying the answer is too large", ack.GetOutcome(), ack.GetMessage())
	}
	if ack.GetDeliveryId() != "d1" || len(ack.GetPatch()) != 0 {
		t.Errorf("ack for %q with a %d-byte patch, want d1 and no patch", ack.GetDeliveryId(), len(ack.GetPatch()))
	}
}
