package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// bindingCase is one registration and the binding the Hello must carry for it.
type bindingCase struct {
	name     string
	register func(h *sdk.Handler)
	want     *tetherv1.Binding
}

// checkHelloBindings registers every case on one handler, connects, and
// compares the Hello's bindings with the cases, in order.
func checkHelloBindings(t *testing.T, tests []bindingCase) {
	t.Helper()
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options()...)
	for _, tt := range tests {
		tt.register(h)
	}
	hs.run(h)
	hello := hs.session().hello
	if len(hello.GetBindings()) != len(tests) {
		t.Fatalf("got %d bindings, want %d:\n%s", len(hello.GetBindings()), len(tests), prototext.Format(hello))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hello.GetBindings()[i]; !proto.Equal(got, tt.want) {
				t.Errorf("binding %d:\ngot  %s\nwant %s", i, prototext.Format(got), prototext.Format(tt.want))
			}
		})
	}
}

var cmResource = &tetherv1.Resource{Version: "v1", Resource: "configmaps"}

func TestTimerHelloCarriesTimerOptions(t *testing.T) {
	checkHelloBindings(t, []bindingCase{{
		name:     "interval only",
		register: func(h *sdk.Handler) { h.OnTimer(configMaps, 30*time.Second, noop) },
		want: &tetherv1.Binding{Id: "timer-0", Kind: tetherv1.BindingKind_BINDING_KIND_TIMER, Resource: cmResource,
			Timer: &tetherv1.TimerOptions{Interval: durationpb.New(30 * time.Second)}},
	}, {
		name:     "the minimum interval",
		register: func(h *sdk.Handler) { h.OnTimer(configMaps, sdk.MinTimerInterval, noop) },
		want: &tetherv1.Binding{Id: "timer-1", Kind: tetherv1.BindingKind_BINDING_KIND_TIMER, Resource: cmResource,
			Timer: &tetherv1.TimerOptions{Interval: durationpb.New(100 * time.Millisecond)}},
	}, {
		name: "every option, with selectors and retries",
		register: func(h *sdk.Handler) {
			h.OnTimer(configMaps, time.Minute, noop, sdk.ID("expire"), sdk.InitialDelay(10*time.Second),
				sdk.Idle(5*time.Minute), sdk.Sharp(), sdk.Labels("app=web"), sdk.Retries(2),
				sdk.Timeout(20*time.Second))
		},
		want: &tetherv1.Binding{Id: "expire", Kind: tetherv1.BindingKind_BINDING_KIND_TIMER, Resource: cmResource,
			LabelSelector: "app=web", Retries: proto.Int32(2), Timeout: durationpb.New(20 * time.Second),
			Timer: &tetherv1.TimerOptions{Interval: durationpb.New(time.Minute),
				InitialDelay: durationpb.New(10 * time.Second), Idle: durationpb.New(5 * time.Minute), Sharp: true}},
	}, {
		name:     "default ids count timers on",
		register: func(h *sdk.Handler) { h.OnTimer(configMaps, time.Hour, noop, sdk.Idle(0)) },
		want: &tetherv1.Binding{Id: "timer-3", Kind: tetherv1.BindingKind_BINDING_KIND_TIMER, Resource: cmResource,
			Timer: &tetherv1.TimerOptions{Interval: durationpb.New(time.Hour)}},
	}})
}

func TestFinalizerPolicyAcceptedForTimersAndDaemons(t *testing.T) {
	policies := []struct {
		policy sdk.FinalizerPolicy
		want   tetherv1.FinalizerPolicy
	}{
		{sdk.FinalizerDefault, tetherv1.FinalizerPolicy_FINALIZER_POLICY_UNSPECIFIED},
		{sdk.FinalizerHold, tetherv1.FinalizerPolicy_FINALIZER_POLICY_HOLD},
		{sdk.FinalizerStrict, tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT},
		{sdk.FinalizerNone, tetherv1.FinalizerPolicy_FINALIZER_POLICY_NONE},
	}
	var tests []bindingCase
	for i, p := range policies {
		tests = append(tests, bindingCase{
			name:     "timer " + p.policy.String(),
			register: func(h *sdk.Handler) { h.OnTimer(configMaps, time.Second, noop, sdk.Finalizer(p.policy)) },
			want: &tetherv1.Binding{Id: "timer-" + string(rune('0'+i)), Kind: tetherv1.BindingKind_BINDING_KIND_TIMER,
				Resource: cmResource, Finalizer: p.want, Timer: &tetherv1.TimerOptions{Interval: durationpb.New(time.Second)}},
		}, bindingCase{
			name:     "daemon " + p.policy.String(),
			register: func(h *sdk.Handler) { h.OnDaemon(configMaps, noop, sdk.Finalizer(p.policy)) },
			want: &tetherv1.Binding{Id: "daemon-" + string(rune('0'+i)), Kind: tetherv1.BindingKind_BINDING_KIND_DAEMON,
				Resource: cmResource, Finalizer: p.want, Daemon: &tetherv1.DaemonOptions{}},
		})
	}
	checkHelloBindings(t, tests)
}

// tick builds a TICK delivery for binding "timer-0".
func tick(id string, scheduled time.Time) *tetherv1.Delivery {
	return delivery(id, func(d *tetherv1.Delivery) {
		d.Kind, d.BindingId = tetherv1.DeliveryKind_DELIVERY_KIND_TICK, "timer-0"
		d.Scheduled = timestamppb.New(scheduled)
	})
}

func TestTickCarriesScheduledAndPatches(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		fn      sdk.Func
		outcome tetherv1.Outcome
		message string
		patch   string
		result  string
	}{
		{name: "OK carries patches and result",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.SetAnnotation("example.com/checked", ev.Scheduled.UTC().Format(time.RFC3339))
				ev.PatchStatus(map[string]any{"lastCheck": "ok"})
				ev.SetResult(map[string]any{"ticks": 1})
				return nil
			},
			outcome: tetherv1.Outcome_OUTCOME_OK,
			patch:   `{"metadata": {"annotations": {"example.com/checked": "2030-01-02T03:04:05Z"}}}`,
			result:  `{"ticks": 1}`},
		{name: "error retries",
			fn:      func(context.Context, *sdk.Event) error { return boom },
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "boom"},
		{name: "Permanent fails",
			fn:      func(context.Context, *sdk.Event) error { return sdk.Permanent(boom) },
			outcome: tetherv1.Outcome_OUTCOME_FAIL, message: "boom"},
		{name: "panic retries",
			fn:      func(context.Context, *sdk.Event) error { panic("tick bug") },
			outcome: tetherv1.Outcome_OUTCOME_RETRY, message: "panic: tick bug"},
	}
	scheduled := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type seen struct {
				ev          *sdk.Event
				hasDeadline bool
			}
			got := make(chan seen, 1)
			fn := func(ctx context.Context, ev *sdk.Event) error {
				_, ok := ctx.Deadline()
				got <- seen{ev, ok}
				return tt.fn(ctx, ev)
			}
			ack := handleOne(t, fn, tick("t1", scheduled),
				func(h *sdk.Handler, fn sdk.Func) { h.OnTimer(configMaps, time.Minute, fn) })
			if ack.GetDeliveryId() != "t1" || ack.GetOutcome() != tt.outcome || !strings.HasPrefix(ack.GetMessage(), tt.message) {
				t.Fatalf("ack = %v, want %v with message %q", ack, tt.outcome, tt.message)
			}
			if tt.patch != "" {
				jsonEqual(t, "patch", ack.GetPatch(), tt.patch)
				jsonEqual(t, "status_patch", ack.GetStatusPatch(), `{"lastCheck": "ok"}`)
				jsonEqual(t, "result", ack.GetResult(), tt.result)
			} else if ack.Patch != nil || ack.Result != nil {
				t.Errorf("ack carries patch %s, result %s", ack.Patch, ack.Result)
			}
			s := recv(t, got, "the tick")
			if s.ev.Kind != sdk.Tick || s.ev.Binding != "timer-0" || !s.ev.Scheduled.Equal(scheduled) {
				t.Errorf("event = %v for %q scheduled %s, want a tick for timer-0 scheduled %s",
					s.ev.Kind, s.ev.Binding, s.ev.Scheduled, scheduled)
			}
			if !s.hasDeadline || s.ev.Deadline.IsZero() {
				t.Error("a tick's context has no deadline; it must end at the delivery's deadline")
			}
		})
	}
}

func TestKindNamesIncludeTimersAndDaemons(t *testing.T) {
	for kind, want := range map[sdk.EventKind]string{sdk.Tick: "tick", sdk.DaemonStart: "daemon-start", sdk.Validate: "validate", sdk.Mutate: "mutate", sdk.Mutate + 1: "EventKind(11)"} {
		if got := kind.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", int(kind), got, want)
		}
	}
}
