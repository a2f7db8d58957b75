package sdk_test

import (
	"context"
	"errors"
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

func TestHelloCarriesAdmissionBindings(t *testing.T) {
	sec := &tetherv1.Resource{Version: "v1", Resource: "secrets"}
	tests := []struct {
		name     string
		register func(h *sdk.Handler)
		want     *tetherv1.Binding
	}{{
		name:     "validate with defaults",
		register: func(h *sdk.Handler) { h.OnValidate(secrets, allow) },
		want: &tetherv1.Binding{Id: "validate-0", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE, Resource: sec,
			Admission: &tetherv1.AdmissionOptions{}},
	}, {
		name: "validate with every option",
		register: func(h *sdk.Handler) {
			h.OnValidate(secrets, allow, sdk.ID("owner-check"), sdk.Operations(sdk.OpCreate, sdk.OpDelete),
				sdk.Operations(sdk.OpConnect), sdk.Subresource("status"), sdk.NamespaceSelector("env=prod"),
				sdk.MatchCondition("not-system", `request.userInfo.username != "system:admin"`),
				sdk.MatchCondition("has-data", "has(object.data)"), sdk.Failure(sdk.FailClosed),
				sdk.NoSideEffectsOnDryRun(), sdk.Timeout(5*time.Second), sdk.Labels("app=web"),
				sdk.Namespaces("prod"), sdk.AnnotationPresent("example.com/checked"), sdk.When("object.type == 'Opaque'"))
		},
		want: &tetherv1.Binding{Id: "owner-check", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE, Resource: sec,
			Namespaces: []string{"prod"}, LabelSelector: "app=web",
			Annotations: []*tetherv1.AnnotationFilter{{Key: "example.com/checked", Operator: tetherv1.AnnotationFilter_OPERATOR_PRESENT}},
			When:        "object.type == 'Opaque'",
			Admission: &tetherv1.AdmissionOptions{
				Operations: []tetherv1.AdmissionOperation{
					tetherv1.AdmissionOperation_ADMISSION_OPERATION_CREATE,
					tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE,
					tetherv1.AdmissionOperation_ADMISSION_OPERATION_CONNECT,
				},
				Subresource:       "status",
				NamespaceSelector: "env=prod",
				MatchConditions: []*tetherv1.MatchCondition{
					{Name: "not-system", Expression: `request.userInfo.username != "system:admin"`},
					{Name: "has-data", Expression: "has(object.data)"},
				},
				Timeout:       durationpb.New(5 * time.Second),
				FailurePolicy: tetherv1.FailurePolicy_FAILURE_POLICY_FAIL,
				SideEffects:   tetherv1.SideEffects_SIDE_EFFECTS_NONE_ON_DRY_RUN,
			}},
	}, {
		name: "third validate counts the one with an explicit id, failing open with the longest timeout",
		register: func(h *sdk.Handler) {
			h.OnValidate(secrets, allow, sdk.Failure(sdk.FailOpen), sdk.Timeout(30*time.Second))
		},
		want: &tetherv1.Binding{Id: "validate-2", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE, Resource: sec,
			Admission: &tetherv1.AdmissionOptions{Timeout: durationpb.New(30 * time.Second),
				FailurePolicy: tetherv1.FailurePolicy_FAILURE_POLICY_IGNORE}},
	}, {
		name:     "mutate with defaults",
		register: func(h *sdk.Handler) { h.OnMutate(configMaps, allow) },
		want: &tetherv1.Binding{Id: "mutate-0", Kind: tetherv1.BindingKind_BINDING_KIND_MUTATE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "configmaps"}, Admission: &tetherv1.AdmissionOptions{}},
	}, {
		name: "strict mutate keeps its webhook",
		register: func(h *sdk.Handler) {
			h.OnMutate(sdk.GVK("apps", "v1", "Deployment"), allow, sdk.Finalizer(sdk.FinalizerStrict),
				sdk.Subresource("*"), sdk.Timeout(time.Second))
		},
		want: &tetherv1.Binding{Id: "mutate-1", Kind: tetherv1.BindingKind_BINDING_KIND_MUTATE,
			Resource:  &tetherv1.Resource{Group: "apps", Version: "v1", Kind: "Deployment"},
			Finalizer: tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT,
			Admission: &tetherv1.AdmissionOptions{Subresource: "*", Timeout: durationpb.New(time.Second)}},
	}, {
		name:     "a create between them keeps its own timeout",
		register: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.Timeout(90*time.Second)) },
		want: &tetherv1.Binding{Id: "create-0", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "configmaps"}, Timeout: durationpb.New(90 * time.Second)},
	}}

	hs := newHarness(t, nil)
	handler := sdk.New("secret-policy", hs.options()...)
	for _, tt := range tests {
		tt.register(handler)
	}
	hs.run(handler)
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

func TestInvalidAdmissionConfigurationFailsRunBeforeConnecting(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *sdk.Handler)
		want  string
	}{
		{name: "operations on a create", setup: func(h *sdk.Handler) { h.OnCreate(configMaps, noop, sdk.Operations(sdk.OpCreate)) },
			want: "Operations applies to validate and mutate bindings only"},
		{name: "subresource on a timer", setup: func(h *sdk.Handler) { h.OnTimer(configMaps, time.Second, noop, sdk.Subresource("status")) },
			want: "Subresource applies to validate and mutate bindings only"},
		{name: "namespace selector on a daemon", setup: func(h *sdk.Handler) { h.OnDaemon(configMaps, noop, sdk.NamespaceSelector("a=b")) },
			want: "NamespaceSelector applies to validate and mutate bindings only"},
		{name: "match condition on an update", setup: func(h *sdk.Handler) { h.OnUpdate(configMaps, noop, sdk.MatchCondition("a", "true")) },
			want: "MatchCondition applies to validate and mutate bindings only"},
		{name: "failure policy on a delete", setup: func(h *sdk.Handler) { h.OnDelete(configMaps, noop, sdk.Failure(sdk.FailClosed)) },
			want: "Failure applies to validate and mutate bindings only"},
		{name: "side effects on an event", setup: func(h *sdk.Handler) { h.OnEvent(configMaps, noop, sdk.NoSideEffectsOnDryRun()) },
			want: "NoSideEffectsOnDryRun applies to validate and mutate bindings only"},
		{name: "timer option on a validate", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Sharp()) },
			want: "Sharp applies to timer bindings only"},
		{name: "timeout below a second", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Timeout(500*time.Millisecond)) },
			want: "Timeout 500ms: a webhook timeout is whole seconds from 1s to 30s"},
		{name: "timeout above 30 seconds", setup: func(h *sdk.Handler) { h.OnMutate(secrets, allow, sdk.Timeout(31*time.Second)) },
			want: "Timeout 31s: a webhook timeout is whole seconds from 1s to 30s"},
		{name: "timeout not whole seconds", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Timeout(1500*time.Millisecond)) },
			want: "Timeout 1.5s: a webhook timeout is whole seconds"},
		{name: "negative timeout", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Timeout(-time.Second)) },
			want: "timeout: negative duration"},
		{name: "hold on a validate", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Finalizer(sdk.FinalizerHold)) },
			want: "finalizer HOLD: validate bindings hold no objects"},
		{name: "failing open while strict", setup: func(h *sdk.Handler) {
			h.OnMutate(secrets, allow, sdk.Finalizer(sdk.FinalizerStrict), sdk.Failure(sdk.FailOpen))
		}, want: "FailOpen contradicts finalizer STRICT"},
		{name: "unknown failure policy", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Failure(sdk.FailurePolicy(7))) },
			want: "unknown failure policy 7"},
		{name: "field selector on a mutate", setup: func(h *sdk.Handler) { h.OnMutate(secrets, allow, sdk.Fields("metadata.name=x")) },
			want: "Fields: webhooks cannot select by field; use MatchCondition"},
		{name: "retries on a validate", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Retries(3)) },
			want: "Retries and Backoff do not apply"},
		{name: "backoff on a mutate", setup: func(h *sdk.Handler) { h.OnMutate(secrets, allow, sdk.Backoff(time.Second, time.Minute)) },
			want: "Retries and Backoff do not apply"},
		{name: "optional validate", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Optional()) },
			want: "Optional applies to delete bindings only"},
		{name: "nil admission function", setup: func(h *sdk.Handler) { h.OnValidate(secrets, nil) },
			want: "nil handler function"},
		{name: "unknown operation", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Operations("PATCH")) },
			want: `Operations: unknown operation "PATCH"`},
		{name: "no operation", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Operations()) },
			want: "Operations: no operation given"},
		{name: "bad subresource", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Subresource("Status/x")) },
			want: `Subresource: "Status/x" is neither`},
		{name: "empty subresource", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.Subresource("")) },
			want: `Subresource: "" is neither`},
		{name: "empty namespace selector", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.NamespaceSelector("")) },
			want: "NamespaceSelector: empty selector"},
		{name: "match condition without expression", setup: func(h *sdk.Handler) { h.OnValidate(secrets, allow, sdk.MatchCondition("a", "")) },
			want: "MatchCondition: empty name or expression"},
		{name: "match condition name used twice", setup: func(h *sdk.Handler) {
			h.OnValidate(secrets, allow, sdk.MatchCondition("a", "true"), sdk.MatchCondition("a", "false"))
		}, want: `MatchCondition: name "a" used twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dialed := make(chan struct{}, 1)
			h := sdk.New("secret-policy", sdk.WithInsecure(),
				sdk.WithDialer(func(context.Context, string) (net.Conn, error) {
					dialed <- struct{}{}
					return nil, errors.New("must not dial")
				}))
			tt.setup(h)
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
