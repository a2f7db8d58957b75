package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

func noop(context.Context, *sdk.Event) error { return nil }

func TestHelloDescribesTheRegisteredBindingsInOrder(t *testing.T) {
	cm := &tetherv1.Resource{Version: "v1", Resource: "configmaps"}
	deploy := &tetherv1.Resource{Group: "apps", Version: "v1", Kind: "Deployment"}
	tests := []struct {
		name     string
		register func(h *sdk.Handler)
		want     *tetherv1.Binding
	}{{
		name:     "create with defaults",
		register: func(h *sdk.Handler) { h.OnCreate(configMaps, noop) },
		want:     &tetherv1.Binding{Id: "create-0", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Resource: cm},
	}, {
		name: "second create counts on, with namespaces and selectors",
		register: func(h *sdk.Handler) {
			h.OnCreate(configMaps, noop, sdk.Namespaces("a", "b"), sdk.Labels("app=web,tier!=cache"),
				sdk.Fields("metadata.name=x"))
		},
		want: &tetherv1.Binding{Id: "create-1", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Resource: cm,
			Namespaces: []string{"a", "b"}, LabelSelector: "app=web,tier!=cache", FieldSelector: "metadata.name=x"},
	}, {
		name: "update by kind with annotations and CEL",
		register: func(h *sdk.Handler) {
			h.OnUpdate(sdk.GVK("apps", "v1", "Deployment"), noop, sdk.AnnotationPresent("a"),
				sdk.AnnotationAbsent("b"), sdk.AnnotationEquals("c", "yes"), sdk.When("object.spec.replicas > 1"))
		},
		want: &tetherv1.Binding{Id: "update-0", Kind: tetherv1.BindingKind_BINDING_KIND_UPDATE, Resource: deploy,
			Annotations: []*tetherv1.AnnotationFilter{
				{Key: "a", Operator: tetherv1.AnnotationFilter_OPERATOR_PRESENT},
				{Key: "b", Operator: tetherv1.AnnotationFilter_OPERATOR_ABSENT},
				{Key: "c", Operator: tetherv1.AnnotationFilter_OPERATOR_EQUALS, Value: "yes"},
			},
			When: "object.spec.replicas > 1"},
	}, {
		name: "strict delete with explicit id, retries, timeout and backoff",
		register: func(h *sdk.Handler) {
			h.OnDelete(configMaps, noop, sdk.ID("cleanup"), sdk.Finalizer(sdk.FinalizerStrict), sdk.Retries(5),
				sdk.Timeout(90*time.Second), sdk.Backoff(time.Second, time.Minute))
		},
		want: &tetherv1.Binding{Id: "cleanup", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE, Resource: cm,
			Finalizer: tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT, Retries: proto.Int32(5),
			Timeout: durationpb.New(90 * time.Second), Backoff: durationpb.New(time.Second),
			MaxBackoff: durationpb.New(time.Minute)},
	}, {
		name:     "optional delete retried forever",
		register: func(h *sdk.Handler) { h.OnDelete(configMaps, noop, sdk.Optional(), sdk.Retries(-3)) },
		want: &tetherv1.Binding{Id: "delete-1", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE, Resource: cm,
			Optional: true, Retries: proto.Int32(-1)},
	}, {
		name:     "delete without finalizer",
		register: func(h *sdk.Handler) { h.OnDelete(configMaps, noop, sdk.Finalizer(sdk.FinalizerNone)) },
		want: &tetherv1.Binding{Id: "delete-2", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE, Resource: cm,
			Finalizer: tetherv1.FinalizerPolicy_FINALIZER_POLICY_NONE},
	}, {
		name:     "resume",
		register: func(h *sdk.Handler) { h.OnResume(configMaps, noop) },
		want:     &tetherv1.Binding{Id: "resume-0", Kind: tetherv1.BindingKind_BINDING_KIND_RESUME, Resource: cm},
	}, {
		name:     "field",
		register: func(h *sdk.Handler) { h.OnField(sdk.GVK("apps", "v1", "Deployment"), "spec.replicas", noop) },
		want: &tetherv1.Binding{Id: "field-0", Kind: tetherv1.BindingKind_BINDING_KIND_FIELD, Resource: deploy,
			Field: "spec.replicas"},
	}, {
		name:     "raw events",
		register: func(h *sdk.Handler) { h.OnEvent(configMaps, noop, sdk.Namespaces("kube-system")) },
		want: &tetherv1.Binding{Id: "event-0", Kind: tetherv1.BindingKind_BINDING_KIND_EVENT, Resource: cm,
			Namespaces: []string{"kube-system"}},
	}, {
		name:     "results in status under the binding id",
		register: func(h *sdk.Handler) { h.OnResume(configMaps, noop, sdk.ResultsInStatus("")) },
		want: &tetherv1.Binding{Id: "resume-1", Kind: tetherv1.BindingKind_BINDING_KIND_RESUME, Resource: cm,
			Results: tetherv1.ResultStore_RESULT_STORE_STATUS},
	}, {
		name:     "results in status under a key of Kopf's",
		register: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.ResultsInStatus("create_fn")) },
		want: &tetherv1.Binding{Id: "create-2", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Resource: cm,
			Results: tetherv1.ResultStore_RESULT_STORE_STATUS, ResultKey: "create_fn"},
	}}

	hs := newHarness(t, nil)
	handler := sdk.New("secret-ttl", hs.options(sdk.WithWindow(7), sdk.WithInstanceID("pod-a"), sdk.WithPriority(3))...)
	for _, tt := range tests {
		tt.register(handler)
	}
	hs.run(handler)
	hello := hs.session().hello

	if hello.GetHandler() != "secret-ttl" || hello.GetInstanceId() != "pod-a" || hello.GetWindow() != 7 || hello.GetPriority() != 3 {
		t.Errorf("hello header = %q, %q, window %d, priority %d; want secret-ttl, pod-a, 7, 3",
			hello.GetHandler(), hello.GetInstanceId(), hello.GetWindow(), hello.GetPriority())
	}
	if hello.GetProtocolVersion() != "v1" {
		t.Errorf("protocol_version = %q, want v1", hello.GetProtocolVersion())
	}
	if !strings.HasPrefix(hello.GetSdk(), "tether-go/") {
		t.Errorf("sdk = %q, want tether-go/<version>", hello.GetSdk())
	}
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

func TestInvalidConfigurationFailsRunBeforeConnecting(t *testing.T) {
	tests := []struct {
		name    string
		handler string
		opts    []sdk.Option
		setup   func(h *sdk.Handler)
		want    string
	}{
		{name: "no bindings", setup: func(*sdk.Handler) {}, want: "no bindings"},
		{name: "bad handler name", handler: "Secret_TTL", want: `handler name "Secret_TTL"`},
		{name: "handler name too long", handler: strings.Repeat("a", 41), want: "at most 40"},
		{name: "bad binding id", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.ID("Create!")) }, want: `id "Create!"`},
		{name: "duplicate binding id", setup: func(h *sdk.Handler) {
			h.OnCreate(configMaps, noop, sdk.ID("x"))
			h.OnUpdate(configMaps, noop, sdk.ID("x"))
		}, want: `"x": id used twice`},
		{name: "default id taken", setup: func(h *sdk.Handler) {
			h.OnUpdate(configMaps, noop, sdk.ID("create-0"))
			h.OnCreate(configMaps, noop)
		}, want: `"create-0": id used twice`},
		{name: "optional on create", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.Optional()) }, want: "Optional applies to delete bindings only"},
		{name: "hold on update", setup: func(h *sdk.Handler) { h.OnUpdate(configMaps, noop, sdk.Finalizer(sdk.FinalizerHold)) }, want: "finalizer HOLD applies to delete, timer and daemon bindings only"},
		{name: "strict on event", setup: func(h *sdk.Handler) { h.OnEvent(configMaps, noop, sdk.Finalizer(sdk.FinalizerStrict)) }, want: "finalizer STRICT applies to delete, timer and daemon bindings only"},
		{name: "timer interval below the minimum", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, 99*time.Millisecond, noop) }, want: "timer interval 99ms is below the minimum of 100ms"},
		{name: "timer without interval", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, 0, noop) }, want: "timer interval 0s is below the minimum"},
		{name: "negative timer interval", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, -time.Minute, noop) }, want: "timer interval -1m0s is below the minimum"},
		{name: "negative initial delay", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, time.Second, noop, sdk.InitialDelay(-time.Second)) }, want: "InitialDelay: negative duration"},
		{name: "negative idle", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, time.Second, noop, sdk.Idle(-time.Second)) }, want: "Idle: negative duration"},
		{name: "negative cancellation timeout", setup: func(h *sdk.Handler) { h.OnDaemon(configMaps, noop, sdk.CancellationTimeout(-time.Second)) }, want: "CancellationTimeout: negative duration"},
		{name: "timer option on a create", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.Sharp()) }, want: "Sharp applies to timer bindings only"},
		{name: "timer option on a daemon", setup: func(h *sdk.Handler) { h.OnDaemon(configMaps, noop, sdk.Idle(time.Second)) }, want: "Idle applies to timer bindings only"},
		{name: "daemon option on a timer", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, time.Second, noop, sdk.Restart()) }, want: "Restart applies to daemon bindings only"},
		{name: "daemon option on a delete", setup: func(h *sdk.Handler) { h.OnDelete(configMaps, noop, sdk.CancellationTimeout(time.Second)) }, want: "CancellationTimeout applies to daemon bindings only"},
		{name: "optional timer", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, time.Second, noop, sdk.Optional()) }, want: "Optional applies to delete bindings only"},
		{name: "daemon without function", setup: func(h *sdk.Handler) { h.OnDaemon(configMaps, nil) }, want: "nil handler function"},
		{name: "optional strict delete", setup: func(h *sdk.Handler) {
			h.OnDelete(configMaps, noop, sdk.Optional(), sdk.Finalizer(sdk.FinalizerStrict))
		}, want: "contradicts Optional"},
		{name: "too many namespaces", setup: func(h *sdk.Handler) {
			var many []string
			for i := range 101 {
				many = append(many, fmt.Sprint("ns-", i))
			}
			h.OnCreate(configMaps, noop, sdk.Namespaces(many...))
		}, want: "101 namespaces, more than the 100"},
		{name: "field without path", setup: func(h *sdk.Handler) { h.OnField(configMaps, "", noop) }, want: "not a dotted path"},
		{name: "field with empty segment", setup: func(h *sdk.Handler) { h.OnField(configMaps, "spec..x", noop) }, want: "not a dotted path"},
		{name: "nil function", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, nil) }, want: "nil handler function"},
		{name: "resource without name", setup: func(h *sdk.Handler) { h.OnCreate(sdk.Resource{Version: "v1"}, noop) }, want: "none of resource, kind and name"},
		{name: "resource named twice", setup: func(h *sdk.Handler) { h.OnCreate(sdk.Resource{Name: "deploy", Kind: "Deployment"}, noop) }, want: `name "deploy" is set with resource or kind`},
		{name: "empty annotation key", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.AnnotationPresent("")) }, want: "empty key"},
		{name: "negative timeout", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.Timeout(-time.Second)) }, want: "negative duration"},
		{name: "backoff above its maximum", setup: func(h *sdk.Handler) {
			h.OnCreate(configMaps, noop, sdk.Backoff(time.Minute, time.Second))
		}, want: "initial <= max"},
		{name: "results in status on a webhook", setup: func(h *sdk.Handler) {
			h.OnValidate(configMaps, func(context.Context, *sdk.Review) error { return nil }, sdk.ResultsInStatus(""))
		}, want: "ResultsInStatus applies to"},
		{name: "a result key with a space", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.ResultsInStatus("a b")) }, want: "not printable ASCII"},
		{name: "a result key too long", setup: func(h *sdk.Handler) {
			h.OnCreate(configMaps, noop, sdk.ResultsInStatus(strings.Repeat("k", 254)))
		}, want: "key of 254 bytes, more than 253"},
		{name: "zero window", opts: []sdk.Option{sdk.WithWindow(0)}, want: "WithWindow"},
		{name: "negative priority", opts: []sdk.Option{sdk.WithPriority(-1)}, want: "WithPriority: priority -1 out of range 0..1000"},
		{name: "priority above the maximum", opts: []sdk.Option{sdk.WithPriority(1001)}, want: "WithPriority: priority 1001 out of range"},
		{name: "nil TLS config", opts: []sdk.Option{sdk.WithTLS(nil)}, want: "WithTLS: nil config"},
		{name: "bad reconnect backoff", opts: []sdk.Option{sdk.WithReconnectBackoff(time.Second, time.Millisecond)}, want: "WithReconnectBackoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.handler
			if name == "" {
				name = "secret-ttl"
			}
			dialed := make(chan struct{}, 1)
			opts := append([]sdk.Option{
				sdk.WithInsecure(),
				sdk.WithDialer(func(context.Context, string) (net.Conn, error) {
					dialed <- struct{}{}
					return nil, errors.New("must not dial")
				}),
			}, tt.opts...)
			h := sdk.New(name, opts...)
			if tt.setup != nil {
				tt.setup(h)
			} else {
				h.OnCreate(configMaps, noop)
			}
			err := h.Run(context.Background(), target)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() = %v, want an error containing %q", err, tt.want)
			}
			select {
			case <-dialed:
				t.Error("Run dialed the broker despite the invalid configuration")
			default:
			}
		})
	}
}

func TestInsecureAndTLSTogetherIsInvalid(t *testing.T) {
	h := sdk.New("x", sdk.WithInsecure(), sdk.WithTLS(newTestPKI(t, "bufnet").client))
	h.OnCreate(configMaps, noop)
	err := h.Run(context.Background(), target)
	if err == nil || !strings.Contains(err.Error(), "WithInsecure and WithTLS both given") {
		t.Fatalf("Run() = %v, want a WithInsecure/WithTLS conflict", err)
	}
}
