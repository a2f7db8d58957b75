package binding

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

var (
	secrets    = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Kind: "Secret", Namespaced: true}
	configMaps = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true}
	namespaces = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Kind: "Namespace"}
)

var errDiscoveryDown = errors.New("discovery is down")

// fakeResolver knows a few core resources, by resource or kind.
type fakeResolver struct{}

func (fakeResolver) Resolve(ctx context.Context, q resource.Query) (resource.Resource, error) {
	if ctx == nil {
		return resource.Resource{}, errors.New("no context")
	}
	if q.Resource == "broken" {
		return resource.Resource{}, errDiscoveryDown
	}
	for _, r := range []resource.Resource{secrets, configMaps, namespaces} {
		if q.Group == r.Group && (q.Resource == r.Resource || q.Resource == "" && q.Kind == r.Kind) {
			return r, nil
		}
	}
	return resource.Resource{}, fmt.Errorf("%s: %w", q.Resource, resource.ErrNotFound)
}

var allKinds = map[Kind]bool{
	Create: true, Update: true, Delete: true, Resume: true, Field: true,
	Event: true, Timer: true, Daemon: true, Validate: true, Mutate: true,
}

var lifecycleKinds = map[Kind]bool{
	Create: true, Update: true, Delete: true, Resume: true, Field: true, Event: true,
}

// pb is a valid create binding on secrets, changed by the options.
func pb(opts ...func(*tetherv1.Binding)) *tetherv1.Binding {
	b := &tetherv1.Binding{
		Id:       "on-create",
		Kind:     tetherv1.BindingKind_BINDING_KIND_CREATE,
		Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"},
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

func withID(id string) func(*tetherv1.Binding) { return func(b *tetherv1.Binding) { b.Id = id } }

func withKind(k tetherv1.BindingKind) func(*tetherv1.Binding) {
	return func(b *tetherv1.Binding) { b.Kind = k }
}

func mustCompile(t *testing.T, b *tetherv1.Binding, def Defaults) *Binding {
	t.Helper()
	out, err := Compile(context.Background(), []*tetherv1.Binding{b}, fakeResolver{}, def, allKinds)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return out[0]
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"secret-ttl", true},
		{"a", true},
		{"a1-b2", true},
		{strings.Repeat("a", MaxIDLength), true},
		{strings.Repeat("a", MaxIDLength+1), false},
		{"", false},
		{"Upper", false},
		{"under_score", false},
		{"-lead", false},
		{"trail-", false},
		{"dot.ted", false},
		{"sla/sh", false},
	}
	for _, tt := range tests {
		if err := ValidateName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestCompileReportsTheBindingAndField(t *testing.T) {
	dur := durationpb.New
	good := pb(withID("first"))
	tests := []struct {
		name      string
		bad       *tetherv1.Binding
		supported map[Kind]bool
		field     string
		is        error // also errors.Is, when set
		msg       string
	}{
		{name: "bad id", bad: pb(withID("Bad_ID")), field: "id"},
		{name: "missing id", bad: pb(withID("")), field: "id", msg: "is required"},
		{name: "id too long", bad: pb(withID(strings.Repeat("x", MaxIDLength+1))), field: "id"},
		{name: "duplicate id", bad: pb(withID("first")), field: "id", msg: "used by another binding"},
		{name: "unspecified kind", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_UNSPECIFIED)), field: "kind", msg: "unknown kind"},
		{name: "unknown kind", bad: pb(withKind(tetherv1.BindingKind(99))), field: "kind", msg: "unknown kind"},
		{name: "unsupported kind", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_TIMER)), supported: lifecycleKinds, field: "kind", is: ErrUnsupported, msg: "timer"},
		{name: "missing resource", bad: pb(func(b *tetherv1.Binding) { b.Resource = nil }), field: "resource", msg: "is required"},
		{name: "resource not found", bad: pb(func(b *tetherv1.Binding) { b.Resource.Resource = "gizmos" }), field: "resource", is: resource.ErrNotFound},
		{name: "resolver error", bad: pb(func(b *tetherv1.Binding) { b.Resource.Resource = "broken" }), field: "resource", is: errDiscoveryDown},
		{name: "bad namespace", bad: pb(func(b *tetherv1.Binding) { b.Namespaces = []string{"ok", "Not_OK"} }), field: "namespaces", msg: "Not_OK"},
		{name: "a namespace twice", bad: pb(func(b *tetherv1.Binding) { b.Namespaces = []string{"a", "b", "a"} }), field: "namespaces", msg: `"a" is named twice`},
		{name: "too many namespaces", bad: pb(func(b *tetherv1.Binding) {
			for i := range tetherv1.MaxNamespaces + 1 {
				b.Namespaces = append(b.Namespaces, fmt.Sprint("ns-", i))
			}
		}), field: "namespaces", msg: "101 namespaces, more than the 100"},
		{name: "namespaces on a cluster-scoped resource", bad: pb(func(b *tetherv1.Binding) {
			b.Resource.Resource = "namespaces"
			b.Namespaces = []string{"default"}
		}), field: "namespaces", msg: "not namespaced"},
		{name: "bad label selector", bad: pb(func(b *tetherv1.Binding) { b.LabelSelector = "app in (" }), field: "label_selector"},
		{name: "bad field selector", bad: pb(func(b *tetherv1.Binding) { b.FieldSelector = "metadata.name" }), field: "field_selector"},
		{name: "bad annotation key", bad: pb(func(b *tetherv1.Binding) {
			b.Annotations = []*tetherv1.AnnotationFilter{{Key: "not a key!", Operator: tetherv1.AnnotationFilter_OPERATOR_PRESENT}}
		}), field: "annotations", msg: "not a key!"},
		{name: "annotation without operator", bad: pb(func(b *tetherv1.Binding) {
			b.Annotations = []*tetherv1.AnnotationFilter{{Key: "example.com/a"}}
		}), field: "annotations", msg: "operator is required"},
		{name: "annotation with an unknown operator", bad: pb(func(b *tetherv1.Binding) {
			b.Annotations = []*tetherv1.AnnotationFilter{{Key: "example.com/a", Operator: 9}}
		}), field: "annotations", msg: "operator is required"},
		{name: "CEL that does not compile", bad: pb(func(b *tetherv1.Binding) { b.When = "object." }), field: "when"},
		{name: "CEL with an unknown variable", bad: pb(func(b *tetherv1.Binding) { b.When = "obj.x == 1" }), field: "when"},
		{name: "CEL that is not bool", bad: pb(func(b *tetherv1.Binding) { b.When = "1 + 1" }), field: "when", msg: "want bool"},
		{name: "field binding without field", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_FIELD)), field: "field", msg: "is required"},
		{name: "field with an empty segment", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_FIELD), func(b *tetherv1.Binding) { b.Field = "spec..x" }), field: "field", msg: "empty segment"},
		{name: "field on a non-field binding", bad: pb(func(b *tetherv1.Binding) { b.Field = "spec.x" }), field: "field", msg: "only for field bindings"},
		{name: "optional on non-delete", bad: pb(func(b *tetherv1.Binding) { b.Optional = true }), field: "optional"},
		{name: "HOLD on a create binding", bad: pb(func(b *tetherv1.Binding) { b.Finalizer = tetherv1.FinalizerPolicy_FINALIZER_POLICY_HOLD }), field: "finalizer", msg: "never hold"},
		{name: "STRICT on an update binding", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_UPDATE), func(b *tetherv1.Binding) {
			b.Finalizer = tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT
		}), field: "finalizer"},
		{name: "unknown finalizer policy", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_DELETE), func(b *tetherv1.Binding) {
			b.Finalizer = tetherv1.FinalizerPolicy(42)
		}), field: "finalizer", msg: "unknown policy"},
		{name: "negative timeout", bad: pb(func(b *tetherv1.Binding) { b.Timeout = dur(-time.Second) }), field: "timeout", msg: "negative"},
		{name: "negative backoff", bad: pb(func(b *tetherv1.Binding) { b.Backoff = dur(-time.Second) }), field: "backoff"},
		{name: "negative max backoff", bad: pb(func(b *tetherv1.Binding) { b.MaxBackoff = dur(-time.Second) }), field: "max_backoff"},
		{name: "timer options on a create binding", bad: pb(func(b *tetherv1.Binding) {
			b.Timer = &tetherv1.TimerOptions{Interval: dur(time.Second)}
		}), field: "timer", msg: "only for timer bindings"},
		{name: "timer without interval", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_TIMER)), field: "timer.interval", msg: "is required"},
		{name: "timer interval too short", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_TIMER), func(b *tetherv1.Binding) {
			b.Timer = &tetherv1.TimerOptions{Interval: dur(MinInterval / 2)}
		}), field: "timer.interval", msg: "shorter than"},
		{name: "negative timer initial delay", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_TIMER), func(b *tetherv1.Binding) {
			b.Timer = &tetherv1.TimerOptions{Interval: dur(time.Second), InitialDelay: dur(-time.Second)}
		}), field: "timer.initial_delay"},
		{name: "negative timer idle", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_TIMER), func(b *tetherv1.Binding) {
			b.Timer = &tetherv1.TimerOptions{Interval: dur(time.Second), Idle: dur(-time.Second)}
		}), field: "timer.idle"},
		{name: "daemon options on a create binding", bad: pb(func(b *tetherv1.Binding) {
			b.Daemon = &tetherv1.DaemonOptions{Restart: true}
		}), field: "daemon", msg: "only for daemon bindings"},
		{name: "result key without status results", bad: pb(func(b *tetherv1.Binding) { b.ResultKey = "create_fn" }),
			field: "result_key", msg: "only for results stored in status"},
		{name: "unknown result store", bad: pb(func(b *tetherv1.Binding) { b.Results = tetherv1.ResultStore(7) }),
			field: "results", msg: "unknown result store"},
		{name: "status results on an admission binding", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_VALIDATE), func(b *tetherv1.Binding) {
			b.Results = tetherv1.ResultStore_RESULT_STORE_STATUS
		}), field: "results", msg: "store no results"},
		{name: "result key too long", bad: pb(func(b *tetherv1.Binding) {
			b.Results, b.ResultKey = tetherv1.ResultStore_RESULT_STORE_STATUS, strings.Repeat("k", tetherv1.MaxResultKeyBytes+1)
		}), field: "result_key", msg: "254 bytes, more than 253"},
		{name: "result key with a space", bad: pb(func(b *tetherv1.Binding) {
			b.Results, b.ResultKey = tetherv1.ResultStore_RESULT_STORE_STATUS, "create fn"
		}), field: "result_key", msg: "not printable ASCII"},
		{name: "result key with a control character", bad: pb(func(b *tetherv1.Binding) {
			b.Results, b.ResultKey = tetherv1.ResultStore_RESULT_STORE_STATUS, "a\nb"
		}), field: "result_key", msg: "not printable ASCII"},
		{name: "result key not ASCII", bad: pb(func(b *tetherv1.Binding) {
			b.Results, b.ResultKey = tetherv1.ResultStore_RESULT_STORE_STATUS, "résultat"
		}), field: "result_key", msg: "not printable ASCII"},
		{name: "negative daemon cancellation timeout", bad: pb(withKind(tetherv1.BindingKind_BINDING_KIND_DAEMON), func(b *tetherv1.Binding) {
			b.Daemon = &tetherv1.DaemonOptions{CancellationTimeout: dur(-time.Second)}
		}), field: "daemon.cancellation_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			supported := tt.supported
			if supported == nil {
				supported = allKinds
			}
			_, err := Compile(context.Background(), []*tetherv1.Binding{good, tt.bad}, fakeResolver{}, Defaults{}, supported)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			if fe.Index != 1 || fe.ID != tt.bad.GetId() || fe.Field != tt.field {
				t.Errorf("FieldError{Index: %d, ID: %q, Field: %q}, want {1, %q, %q}", fe.Index, fe.ID, fe.Field, tt.bad.GetId(), tt.field)
			}
			wantPrefix := "bindings[1]"
			if tt.bad.GetId() != "" {
				wantPrefix += fmt.Sprintf(" (%q)", tt.bad.GetId())
			}
			wantPrefix += "." + tt.field + ": "
			if !strings.HasPrefix(err.Error(), wantPrefix) {
				t.Errorf("message %q does not start with %q", err, wantPrefix)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not contain %q", err, tt.msg)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
			if tt.is != ErrUnsupported && errors.Is(err, ErrUnsupported) {
				t.Errorf("%v is ErrUnsupported", err)
			}
		})
	}
}

func TestCompileNeedsABinding(t *testing.T) {
	for _, pbs := range [][]*tetherv1.Binding{nil, {}} {
		_, err := Compile(context.Background(), pbs, fakeResolver{}, Defaults{}, allKinds)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "bindings" || fe.Index != 0 {
			t.Errorf("Compile(%v) = %v, want a FieldError for bindings", pbs, err)
		}
	}
}

func TestCompileFillsInDefaults(t *testing.T) {
	dur := durationpb.New
	tests := []struct {
		name string
		def  Defaults
		pb   *tetherv1.Binding
		want RetryPolicy
	}{
		{
			name: "broker defaults: forever, 1m, 1s..5m",
			pb:   pb(),
			want: RetryPolicy{Retries: -1, Timeout: time.Minute, Backoff: time.Second, MaxBackoff: 5 * time.Minute},
		},
		{
			name: "configured defaults",
			def:  Defaults{Retries: 3, Timeout: 10 * time.Second, Backoff: 2 * time.Second, MaxBackoff: time.Minute},
			pb:   pb(),
			want: RetryPolicy{Retries: 3, Timeout: 10 * time.Second, Backoff: 2 * time.Second, MaxBackoff: time.Minute},
		},
		{
			name: "the binding's own settings win",
			def:  Defaults{Retries: 3},
			pb: pb(func(b *tetherv1.Binding) {
				b.Retries, b.Timeout, b.Backoff, b.MaxBackoff = proto.Int32(5), dur(30*time.Second), dur(3*time.Second), dur(2*time.Minute)
			}),
			want: RetryPolicy{Retries: 5, Timeout: 30 * time.Second, Backoff: 3 * time.Second, MaxBackoff: 2 * time.Minute},
		},
		{
			name: "negative retries mean forever",
			def:  Defaults{Retries: 3},
			pb:   pb(func(b *tetherv1.Binding) { b.Retries = proto.Int32(-1) }),
			want: RetryPolicy{Retries: -1, Timeout: time.Minute, Backoff: time.Second, MaxBackoff: 5 * time.Minute},
		},
		{
			name: "explicit zero retries mean none",
			def:  Defaults{Retries: 3},
			pb:   pb(func(b *tetherv1.Binding) { b.Retries = proto.Int32(0) }),
			want: RetryPolicy{Retries: 0, Timeout: time.Minute, Backoff: time.Second, MaxBackoff: 5 * time.Minute},
		},
		{
			name: "retries below -1 are forever too",
			pb:   pb(func(b *tetherv1.Binding) { b.Retries = proto.Int32(-7) }),
			want: RetryPolicy{Retries: -1, Timeout: time.Minute, Backoff: time.Second, MaxBackoff: 5 * time.Minute},
		},
		{
			name: "zero durations take the defaults",
			pb:   pb(func(b *tetherv1.Binding) { b.Timeout, b.Backoff, b.MaxBackoff = dur(0), dur(0), dur(0) }),
			want: RetryPolicy{Retries: -1, Timeout: time.Minute, Backoff: time.Second, MaxBackoff: 5 * time.Minute},
		},
		{
			name: "max backoff is raised to a larger backoff",
			pb:   pb(func(b *tetherv1.Binding) { b.Backoff = dur(10 * time.Minute) }),
			want: RetryPolicy{Retries: -1, Timeout: time.Minute, Backoff: 10 * time.Minute, MaxBackoff: 10 * time.Minute},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCompile(t, tt.pb, tt.def).Retry; got != tt.want {
				t.Errorf("Retry = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCompileResolvesAndParses(t *testing.T) {
	b := mustCompile(t, pb(withKind(tetherv1.BindingKind_BINDING_KIND_FIELD), func(b *tetherv1.Binding) {
		b.Id = "replicas"
		b.Resource = &tetherv1.Resource{Version: "v1", Kind: "ConfigMap"}
		b.Namespaces = []string{"a", "b"}
		b.LabelSelector = "app=web"
		b.FieldSelector = "metadata.name=x"
		b.Annotations = []*tetherv1.AnnotationFilter{
			{Key: "example.com/on", Operator: tetherv1.AnnotationFilter_OPERATOR_EQUALS, Value: "yes"},
			{Key: "off", Operator: tetherv1.AnnotationFilter_OPERATOR_ABSENT},
		}
		b.When = "object.data.x == 'y'"
		b.Field = "spec.replicas"
	}), Defaults{})
	if b.ID != "replicas" || b.Kind != Field || b.Resource != configMaps {
		t.Errorf("binding %+v", b)
	}
	if fmt.Sprint(b.Namespaces) != "[a b]" || b.Labels.String() != "app=web" || b.Fields.String() != "metadata.name=x" {
		t.Errorf("scope %v %v %v", b.Namespaces, b.Labels, b.Fields)
	}
	wantAnn := []AnnotationFilter{{Key: "example.com/on", Op: AnnotationEquals, Value: "yes"}, {Key: "off", Op: AnnotationAbsent}}
	if fmt.Sprint(b.Annotations) != fmt.Sprint(wantAnn) {
		t.Errorf("annotations %+v, want %+v", b.Annotations, wantAnn)
	}
	if b.When == nil || b.When.String() != "object.data.x == 'y'" {
		t.Errorf("when %v", b.When)
	}
	if fmt.Sprint(b.FieldPath) != "[spec replicas]" {
		t.Errorf("field path %q", b.FieldPath)
	}
	if b := mustCompile(t, pb(), Defaults{}); b.When != nil || b.FieldPath != nil || !b.Labels.Empty() || !b.Fields.Empty() {
		t.Errorf("a plain binding has filters: %+v", b)
	}
}

func TestCompileSetsPolicies(t *testing.T) {
	k := func(k tetherv1.BindingKind) func(*tetherv1.Binding) { return withKind(k) }
	f := func(p tetherv1.FinalizerPolicy) func(*tetherv1.Binding) {
		return func(b *tetherv1.Binding) { b.Finalizer = p }
	}
	optional := func(b *tetherv1.Binding) { b.Optional = true }
	tests := []struct {
		name      string
		pb        *tetherv1.Binding
		want      Policy
		wantHolds bool
	}{
		{"create", pb(), PolicyNone, false},
		{"create NONE", pb(f(tetherv1.FinalizerPolicy_FINALIZER_POLICY_NONE)), PolicyNone, false},
		{"update", pb(k(tetherv1.BindingKind_BINDING_KIND_UPDATE)), PolicyNone, false},
		{"event", pb(k(tetherv1.BindingKind_BINDING_KIND_EVENT)), PolicyNone, false},
		{"delete", pb(k(tetherv1.BindingKind_BINDING_KIND_DELETE)), PolicyHold, true},
		{"delete HOLD", pb(k(tetherv1.BindingKind_BINDING_KIND_DELETE), f(tetherv1.FinalizerPolicy_FINALIZER_POLICY_HOLD)), PolicyHold, true},
		{"delete STRICT", pb(k(tetherv1.BindingKind_BINDING_KIND_DELETE), f(tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT)), PolicyStrict, true},
		{"delete NONE", pb(k(tetherv1.BindingKind_BINDING_KIND_DELETE), f(tetherv1.FinalizerPolicy_FINALIZER_POLICY_NONE)), PolicyNone, false},
		{"optional delete", pb(k(tetherv1.BindingKind_BINDING_KIND_DELETE), optional), PolicyHold, false},
		{"timer", pb(k(tetherv1.BindingKind_BINDING_KIND_TIMER), func(b *tetherv1.Binding) {
			b.Timer = &tetherv1.TimerOptions{Interval: durationpb.New(time.Second)}
		}), PolicyHold, true},
		{"daemon", pb(k(tetherv1.BindingKind_BINDING_KIND_DAEMON)), PolicyHold, true},
		{"daemon NONE", pb(k(tetherv1.BindingKind_BINDING_KIND_DAEMON), f(tetherv1.FinalizerPolicy_FINALIZER_POLICY_NONE)), PolicyNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustCompile(t, tt.pb, Defaults{})
			if b.Policy != tt.want {
				t.Errorf("Policy = %v, want %v", b.Policy, tt.want)
			}
			if b.Holds() != tt.wantHolds {
				t.Errorf("Holds() = %v, want %v", b.Holds(), tt.wantHolds)
			}
		})
	}
}

func TestRetryPolicyDelayDoublesAndCaps(t *testing.T) {
	r := RetryPolicy{Backoff: time.Second, MaxBackoff: 10 * time.Second}
	tests := []struct {
		n    int
		want time.Duration
	}{
		{1, time.Second},
		{2, 2 * time.Second},
		{3, 4 * time.Second},
		{4, 8 * time.Second},
		{5, 10 * time.Second},
		{6, 10 * time.Second},
		{1 << 20, 10 * time.Second},
	}
	for _, tt := range tests {
		if got := r.Delay(tt.n); got != tt.want {
			t.Errorf("Delay(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

// TestRetryPolicyDelayNeverOverflows: a binding may ask for any max_backoff;
// doubling past the largest duration must not wrap to zero or below.
func TestRetryPolicyDelayNeverOverflows(t *testing.T) {
	const maxDuration = time.Duration(1<<63 - 1)
	for _, backoff := range []time.Duration{time.Nanosecond, time.Second, time.Hour, maxDuration / 3} {
		r := RetryPolicy{Backoff: backoff, MaxBackoff: maxDuration}
		prev := time.Duration(0)
		for n := 1; n <= 200; n++ {
			d := r.Delay(n)
			if d < prev || d <= 0 {
				t.Fatalf("backoff %v: Delay(%d) = %v after Delay(%d) = %v", backoff, n, d, n-1, prev)
			}
			prev = d
		}
		if prev != maxDuration {
			t.Errorf("backoff %v: Delay(200) = %v, want the cap", backoff, prev)
		}
	}
	b := mustCompile(t, pb(func(b *tetherv1.Binding) {
		b.MaxBackoff = durationpb.New(maxDuration)
	}), Defaults{})
	if d := b.Retry.Delay(64); d <= 0 {
		t.Errorf("compiled binding with a huge max_backoff: Delay(64) = %v", d)
	}
}

func TestRetryPolicyExhausted(t *testing.T) {
	tests := []struct {
		retries, n int
		want       bool
	}{
		{3, 1, false},
		{3, 3, false},
		{3, 4, true},
		{0, 1, true},
		{-1, 1, false},
		{-1, 1 << 30, false},
	}
	for _, tt := range tests {
		if got := (RetryPolicy{Retries: tt.retries}).Exhausted(tt.n); got != tt.want {
			t.Errorf("Retries %d: Exhausted(%d) = %v, want %v", tt.retries, tt.n, got, tt.want)
		}
	}
}

func secret(ns, name string, labels, annotations map[string]string, extra map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret"}}
	u.SetNamespace(ns)
	u.SetName(name)
	if labels != nil {
		u.SetLabels(labels)
	}
	if annotations != nil {
		u.SetAnnotations(annotations)
	}
	for k, v := range extra {
		u.Object[k] = v
	}
	return u
}

func TestMatches(t *testing.T) {
	web := secret("a", "x", map[string]string{"app": "web", "tier": "front"}, map[string]string{"example.com/on": "yes"},
		map[string]any{"type": "kubernetes.io/tls", "status": map[string]any{"phase": "Running"}, "spec": map[string]any{"n": int64(2)}})
	bare := secret("c", "y", nil, nil, nil)
	tests := []struct {
		name string
		pb   *tetherv1.Binding
		obj  *unstructured.Unstructured
		old  map[string]any
		want bool
	}{
		{"no filters", pb(), bare, nil, true},
		{"namespace listed", pb(func(b *tetherv1.Binding) { b.Namespaces = []string{"a", "b"} }), web, nil, true},
		{"namespace not listed", pb(func(b *tetherv1.Binding) { b.Namespaces = []string{"a", "b"} }), bare, nil, false},
		{"labels match", pb(func(b *tetherv1.Binding) { b.LabelSelector = "app=web,tier!=cache" }), web, nil, true},
		{"labels do not match", pb(func(b *tetherv1.Binding) { b.LabelSelector = "app=api" }), web, nil, false},
		{"label existence on an object without labels", pb(func(b *tetherv1.Binding) { b.LabelSelector = "app" }), bare, nil, false},
		{"label absence on an object without labels", pb(func(b *tetherv1.Binding) { b.LabelSelector = "!app" }), bare, nil, true},
		{"metadata.name matches", pb(func(b *tetherv1.Binding) { b.FieldSelector = "metadata.name=x" }), web, nil, true},
		{"metadata.name does not match", pb(func(b *tetherv1.Binding) { b.FieldSelector = "metadata.name=x" }), bare, nil, false},
		{"metadata.namespace", pb(func(b *tetherv1.Binding) { b.FieldSelector = "metadata.namespace!=a" }), bare, nil, true},
		{"type of a Secret", pb(func(b *tetherv1.Binding) { b.FieldSelector = "type=kubernetes.io/tls" }), web, nil, true},
		{"type of a Secret differs", pb(func(b *tetherv1.Binding) { b.FieldSelector = "type=Opaque" }), web, nil, false},
		{"a nested field", pb(func(b *tetherv1.Binding) { b.FieldSelector = "status.phase=Running,metadata.name=x" }), web, nil, true},
		{"a nested field that differs", pb(func(b *tetherv1.Binding) { b.FieldSelector = "status.phase=Pending" }), web, nil, false},
		{"a number field", pb(func(b *tetherv1.Binding) { b.FieldSelector = "spec.n=2" }), web, nil, true},
		{"a missing field is empty", pb(func(b *tetherv1.Binding) { b.FieldSelector = "status.phase!=Running" }), bare, nil, true},
		{"annotation present", pb(annotation("example.com/on", tetherv1.AnnotationFilter_OPERATOR_PRESENT, "")), web, nil, true},
		{"annotation not present", pb(annotation("example.com/on", tetherv1.AnnotationFilter_OPERATOR_PRESENT, "")), bare, nil, false},
		{"annotation absent", pb(annotation("example.com/on", tetherv1.AnnotationFilter_OPERATOR_ABSENT, "")), bare, nil, true},
		{"annotation not absent", pb(annotation("example.com/on", tetherv1.AnnotationFilter_OPERATOR_ABSENT, "")), web, nil, false},
		{"annotation equals", pb(annotation("example.com/on", tetherv1.AnnotationFilter_OPERATOR_EQUALS, "yes")), web, nil, true},
		{"annotation differs", pb(annotation("example.com/on", tetherv1.AnnotationFilter_OPERATOR_EQUALS, "no")), web, nil, false},
		{"annotation equals on a missing key", pb(annotation("example.com/on", tetherv1.AnnotationFilter_OPERATOR_EQUALS, "")), bare, nil, false},
		{"CEL over object", pb(when("object.metadata.name == 'x' && object.spec.n > 1")), web, nil, true},
		{"CEL over object false", pb(when("object.metadata.name == 'y'")), web, nil, false},
		{"CEL sees oldObject as null without an old side", pb(when("oldObject == null")), web, nil, true},
		{"CEL sees oldObject", pb(when("oldObject != null && oldObject.spec.n != object.spec.n")), web, map[string]any{"spec": map[string]any{"n": int64(1)}}, true},
		{"CEL sees an unchanged oldObject", pb(when("oldObject.spec.n != object.spec.n")), web, map[string]any{"spec": map[string]any{"n": 2.0}}, false},
		{"every filter must pass", pb(func(b *tetherv1.Binding) {
			b.Namespaces = []string{"a"}
			b.LabelSelector = "app=web"
			b.FieldSelector = "type=Opaque"
		}), web, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustCompile(t, tt.pb, Defaults{})
			got, err := b.Matches(tt.obj, tt.old)
			if err != nil {
				t.Fatalf("Matches: %v", err)
			}
			if got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
			if !b.ReadsObject() {
				// Then the namespace alone decides: the dispatcher does not
				// decode the object to match it.
				only := &unstructured.Unstructured{Object: map[string]any{}}
				only.SetNamespace(tt.obj.GetNamespace())
				if m, _ := b.Matches(only, nil); m != got {
					t.Errorf("ReadsObject is false, yet more than the namespace changed the answer (%v without the rest)", m)
				}
			}
		})
	}
}

func annotation(key string, op tetherv1.AnnotationFilter_Operator, value string) func(*tetherv1.Binding) {
	return func(b *tetherv1.Binding) {
		b.Annotations = append(b.Annotations, &tetherv1.AnnotationFilter{Key: key, Operator: op, Value: value})
	}
}

func when(src string) func(*tetherv1.Binding) { return func(b *tetherv1.Binding) { b.When = src } }

func TestMatchesReportsCELRuntimeErrors(t *testing.T) {
	tests := []struct{ name, src string }{
		{"a missing key", "object.spec.missing == 1"},
		{"a member of null", "oldObject.spec.n == 1"},
		{"a result that is not a bool", "object.metadata.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustCompile(t, pb(when(tt.src)), Defaults{})
			ok, err := b.Matches(secret("a", "x", nil, nil, map[string]any{"spec": map[string]any{}}), nil)
			if err == nil || ok {
				t.Fatalf("Matches = %v, %v; want false and an error", ok, err)
			}
			if !strings.Contains(err.Error(), tt.src) {
				t.Errorf("error %q does not name the expression", err)
			}
		})
	}
}

func TestCELCostIsBounded(t *testing.T) {
	e, err := CompileExpression("[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, " +
		"[1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))")
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if _, err := e.Eval(map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "cost") {
		t.Errorf("Eval of an expensive expression = %v, want a cost limit error", err)
	}
}

func TestFingerprintDiffersWhenAnyOptionDiffers(t *testing.T) {
	dur := durationpb.New
	base := pb(withKind(tetherv1.BindingKind_BINDING_KIND_DELETE), func(b *tetherv1.Binding) {
		b.Namespaces = []string{"a"}
		b.LabelSelector = "app=web"
		b.FieldSelector = "metadata.name=x"
		b.Annotations = []*tetherv1.AnnotationFilter{{Key: "k", Operator: tetherv1.AnnotationFilter_OPERATOR_EQUALS, Value: "v"}}
		b.When = "true"
		b.Retries = proto.Int32(3)
		b.Timeout, b.Backoff, b.MaxBackoff = dur(time.Minute), dur(time.Second), dur(time.Minute)
	})
	fp := func(t *testing.T, bs ...*tetherv1.Binding) string {
		t.Helper()
		out, err := Compile(context.Background(), bs, fakeResolver{}, Defaults{}, allKinds)
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		return Fingerprint(out)
	}
	baseFP := fp(t, base)
	if again := fp(t, proto.Clone(base).(*tetherv1.Binding)); again != baseFP {
		t.Fatalf("same bindings, different fingerprints:\n%s\n%s", baseFP, again)
	}
	same := proto.Clone(base).(*tetherv1.Binding)
	same.LabelSelector = "app = web"
	if got := fp(t, same); got != baseFP {
		t.Errorf("an equivalent label selector changes the fingerprint:\n%s\n%s", baseFP, got)
	}

	tests := []struct {
		name   string
		change func(*tetherv1.Binding)
	}{
		{"id", func(b *tetherv1.Binding) { b.Id = "other" }},
		{"kind", func(b *tetherv1.Binding) { b.Kind = tetherv1.BindingKind_BINDING_KIND_DAEMON }},
		{"resource", func(b *tetherv1.Binding) { b.Resource.Resource = "configmaps" }},
		{"namespaces", func(b *tetherv1.Binding) { b.Namespaces = []string{"a", "b"} }},
		{"labels", func(b *tetherv1.Binding) { b.LabelSelector = "app=api" }},
		{"fields", func(b *tetherv1.Binding) { b.FieldSelector = "metadata.name=y" }},
		{"annotation value", func(b *tetherv1.Binding) { b.Annotations[0].Value = "w" }},
		{"annotation operator", func(b *tetherv1.Binding) {
			b.Annotations[0].Operator = tetherv1.AnnotationFilter_OPERATOR_PRESENT
			b.Annotations[0].Value = ""
		}},
		{"annotation key", func(b *tetherv1.Binding) { b.Annotations[0].Key = "j" }},
		{"when", func(b *tetherv1.Binding) { b.When = "false" }},
		{"optional", func(b *tetherv1.Binding) { b.Optional = true }},
		{"policy", func(b *tetherv1.Binding) { b.Finalizer = tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT }},
		{"retries", func(b *tetherv1.Binding) { b.Retries = proto.Int32(4) }},
		{"timeout", func(b *tetherv1.Binding) { b.Timeout = dur(2 * time.Minute) }},
		{"backoff", func(b *tetherv1.Binding) { b.Backoff = dur(2 * time.Second) }},
		{"max backoff", func(b *tetherv1.Binding) { b.MaxBackoff = dur(2 * time.Minute) }},
		{"field path", func(b *tetherv1.Binding) {
			b.Kind, b.Finalizer, b.Field = tetherv1.BindingKind_BINDING_KIND_FIELD, 0, "spec.a"
		}},
		{"results", func(b *tetherv1.Binding) { b.Results = tetherv1.ResultStore_RESULT_STORE_STATUS }},
		{"result key", func(b *tetherv1.Binding) {
			b.Results, b.ResultKey = tetherv1.ResultStore_RESULT_STORE_STATUS, "other"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := proto.Clone(base).(*tetherv1.Binding)
			tt.change(changed)
			if got := fp(t, changed); got == baseFP {
				t.Errorf("fingerprint unchanged:\n%s", got)
			}
		})
	}

	t.Run("field path value", func(t *testing.T) {
		field := func(path string) *tetherv1.Binding {
			return pb(withKind(tetherv1.BindingKind_BINDING_KIND_FIELD), func(b *tetherv1.Binding) { b.Field = path })
		}
		if fp(t, field("spec.a")) == fp(t, field("spec.b")) {
			t.Error("field paths spec.a and spec.b share a fingerprint")
		}
	})
	t.Run("timer and daemon options", func(t *testing.T) {
		timer := func(o *tetherv1.TimerOptions) *tetherv1.Binding {
			return pb(withKind(tetherv1.BindingKind_BINDING_KIND_TIMER), func(b *tetherv1.Binding) { b.Timer = o })
		}
		base := fp(t, timer(&tetherv1.TimerOptions{Interval: dur(time.Minute)}))
		for _, o := range []*tetherv1.TimerOptions{
			{Interval: dur(2 * time.Minute)},
			{Interval: dur(time.Minute), InitialDelay: dur(time.Second)},
			{Interval: dur(time.Minute), Idle: dur(time.Second)},
			{Interval: dur(time.Minute), Sharp: true},
		} {
			if fp(t, timer(o)) == base {
				t.Errorf("timer options %v share a fingerprint with interval 1m", o)
			}
		}
		daemon := func(o *tetherv1.DaemonOptions) *tetherv1.Binding {
			return pb(withKind(tetherv1.BindingKind_BINDING_KIND_DAEMON), func(b *tetherv1.Binding) { b.Daemon = o })
		}
		if fp(t, daemon(nil)) == fp(t, daemon(&tetherv1.DaemonOptions{Restart: true})) {
			t.Error("restart does not change the fingerprint")
		}
		if fp(t, daemon(nil)) == fp(t, daemon(&tetherv1.DaemonOptions{CancellationTimeout: dur(time.Second)})) {
			t.Error("cancellation timeout does not change the fingerprint")
		}
	})
	t.Run("order and count", func(t *testing.T) {
		other := pb(withID("second"))
		if fp(t, base, other) == fp(t, other, base) {
			t.Error("order of bindings does not change the fingerprint")
		}
		if fp(t, base, other) == baseFP {
			t.Error("an extra binding does not change the fingerprint")
		}
	})
}

func TestKindAndPolicyNames(t *testing.T) {
	if Create.String() != "create" || Mutate.String() != "mutate" || Kind(0).String() != "unknown" {
		t.Errorf("kind names: %v %v %v", Create, Mutate, Kind(0))
	}
	if PolicyHold.String() != "HOLD" || PolicyStrict.String() != "STRICT" || PolicyNone.String() != "NONE" {
		t.Errorf("policy names: %v %v %v", PolicyHold, PolicyStrict, PolicyNone)
	}
	// The binding kinds mirror the proto enum.
	for k := Create; k <= Mutate; k++ {
		if int32(k) != int32(tetherv1.BindingKind(k).Number()) || !strings.EqualFold(tetherv1.BindingKind(k).String(), "BINDING_KIND_"+k.String()) {
			t.Errorf("kind %v does not match proto %v", k, tetherv1.BindingKind(k))
		}
	}
}

func TestCompileFillsInTimerAndDaemonOptions(t *testing.T) {
	dur := durationpb.New
	timer := mustCompile(t, pb(withKind(tetherv1.BindingKind_BINDING_KIND_TIMER), func(b *tetherv1.Binding) {
		b.Timer = &tetherv1.TimerOptions{Interval: dur(time.Minute), InitialDelay: dur(time.Second), Idle: dur(time.Hour), Sharp: true}
	}), Defaults{})
	if want := (TimerOptions{Interval: time.Minute, InitialDelay: time.Second, Idle: time.Hour, Sharp: true}); timer.Timer != want {
		t.Errorf("Timer = %+v, want %+v", timer.Timer, want)
	}
	tests := []struct {
		name string
		def  Defaults
		opts *tetherv1.DaemonOptions
		want DaemonOptions
	}{
		{"broker default", Defaults{}, nil, DaemonOptions{CancellationTimeout: time.Minute}},
		{"configured default", Defaults{CancellationTimeout: 5 * time.Second}, &tetherv1.DaemonOptions{}, DaemonOptions{CancellationTimeout: 5 * time.Second}},
		{"the binding's own", Defaults{}, &tetherv1.DaemonOptions{CancellationTimeout: dur(time.Second), Restart: true}, DaemonOptions{CancellationTimeout: time.Second, Restart: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustCompile(t, pb(withKind(tetherv1.BindingKind_BINDING_KIND_DAEMON), func(b *tetherv1.Binding) { b.Daemon = tt.opts }), tt.def)
			if b.Daemon != tt.want {
				t.Errorf("Daemon = %+v, want %+v", b.Daemon, tt.want)
			}
		})
	}
}

func TestCompileSetsWhereResultsGo(t *testing.T) {
	status := tetherv1.ResultStore_RESULT_STORE_STATUS
	tests := []struct {
		name string
		pb   *tetherv1.Binding
		want Results
	}{
		{"unspecified: the annotation", pb(withID("create-fn")), Results{}},
		{"annotation", pb(withID("create-fn"), func(b *tetherv1.Binding) { b.Results = tetherv1.ResultStore_RESULT_STORE_ANNOTATION }), Results{}},
		{"status under the binding id", pb(withID("create-fn"), func(b *tetherv1.Binding) { b.Results = status }),
			Results{Status: true, Key: "create-fn"}},
		{"status under Kopf's handler id", pb(withID("create-fn"), func(b *tetherv1.Binding) {
			b.Results, b.ResultKey = status, "Kex.create_fn/spec.field"
		}), Results{Status: true, Key: "Kex.create_fn/spec.field"}},
		{"a key of the longest length", pb(withID("create-fn"), func(b *tetherv1.Binding) {
			b.Results, b.ResultKey = status, strings.Repeat("k", tetherv1.MaxResultKeyBytes)
		}), Results{Status: true, Key: strings.Repeat("k", tetherv1.MaxResultKeyBytes)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Compile(context.Background(), []*tetherv1.Binding{tt.pb}, fakeResolver{}, Defaults{}, allKinds)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if got := out[0].Results; got != tt.want {
				t.Errorf("Results = %+v, want %+v", got, tt.want)
			}
		})
	}
}
