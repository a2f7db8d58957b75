package webhook

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/resource"
)

var (
	gadgets = resource.Resource{
		GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "gadgets"},
		Kind:                 "Gadget", Namespaced: true, HasStatus: true,
	}
	clusterGadgets = resource.Resource{
		GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "clustergadgets"},
		Kind:                 "ClusterGadget",
	}
)

// admissionBinding is a validate binding on gadgets with the options a
// compiled binding has by default, changed by the options.
func admissionBinding(id string, opts ...func(*binding.Binding)) *binding.Binding {
	b := &binding.Binding{
		ID:       id,
		Kind:     binding.Validate,
		Resource: gadgets,
		Admission: binding.AdmissionOptions{
			Operations:    []string{binding.OpCreate, binding.OpUpdate},
			Timeout:       binding.DefaultAdmissionTimeout,
			FailurePolicy: binding.FailIgnore,
			SideEffects:   binding.SideEffectsNone,
		},
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

func mutate(b *binding.Binding) { b.Kind = binding.Mutate }

func strict(b *binding.Binding) {
	b.Policy = binding.PolicyStrict
	b.Admission.FailurePolicy = binding.FailFail
}

func ptr[T any](v T) *T { return &v }

func TestBuildValidatingWebhookWithEveryOption(t *testing.T) {
	b := admissionBinding("check", func(b *binding.Binding) {
		b.Namespaces = []string{"a", "b"}
		b.Admission.Operations = []string{binding.OpCreate, binding.OpDelete}
		b.Admission.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		b.Admission.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpExists},
		}}
		b.Admission.MatchConditions = []binding.MatchCondition{{Name: "not-dry", Expression: "!request.dryRun"}}
		b.Admission.Timeout = 3 * time.Second
		b.Admission.SideEffects = binding.SideEffectsNoneOnDryRun
	})
	bl := builder{handler: "h", url: "https://127.0.0.1:8443", paths: testPaths, ca: []byte("CA"),
		excludeUsers: []string{"system:serviceaccount:tether-system:tether-broker"}, excludeGroups: []string{"system:nodes", `we"ird`}}
	got := bl.build([]*binding.Binding{b}, false)
	want := admissionregistrationv1.ValidatingWebhook{
		Name: "check.h.tether.dev",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			URL: ptr("https://127.0.0.1:8443" + testPaths.Path("h", "check")), CABundle: []byte("CA"),
		},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"test.tether.dev"}, APIVersions: []string{"v1"}, Resources: []string{"gadgets"},
				Scope: ptr(admissionregistrationv1.NamespacedScope),
			},
		}},
		FailurePolicy: ptr(admissionregistrationv1.Ignore),
		MatchPolicy:   ptr(admissionregistrationv1.Equivalent),
		NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"env": "prod"},
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
			},
		},
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpExists},
		}},
		SideEffects:             ptr(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		TimeoutSeconds:          ptr(int32(3)),
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: "tether.dev/not-excluded-user", Expression: `!(request.userInfo.username in ["system:serviceaccount:tether-system:tether-broker"])`},
			{Name: "tether.dev/not-excluded-group", Expression: `!request.userInfo.groups.exists(g, g in ["system:nodes", "we\"ird"])`},
			{Name: "not-dry", Expression: "!request.dryRun"},
		},
	}
	if len(got.mutating) != 0 || len(got.validating) != 1 {
		t.Fatalf("got %d validating and %d mutating webhooks, want 1 and 0", len(got.validating), len(got.mutating))
	}
	if !reflect.DeepEqual(got.validating[0], want) {
		t.Errorf("webhook:\n got %s\nwant %s", toJSON(t, got.validating[0]), toJSON(t, want))
	}
	// The selectors are copies: the API server's answer must not alias the
	// binding, which other goroutines read.
	if got.validating[0].NamespaceSelector == b.Admission.NamespaceSelector || got.validating[0].ObjectSelector == b.Admission.ObjectSelector {
		t.Error("a selector of the webhook aliases the binding's")
	}
	if len(b.Admission.NamespaceSelector.MatchExpressions) != 0 {
		t.Error("building changed the binding's namespace selector")
	}
}

func TestBuildMutatingWebhookThroughService(t *testing.T) {
	bl := builder{handler: "h", service: &Service{Namespace: "tether-system", Name: "tether-broker", Port: 8443}, paths: testPaths}
	got := bl.build([]*binding.Binding{admissionBinding("add-label", mutate)}, false)
	want := admissionregistrationv1.MutatingWebhook{
		Name: "add-label.h.tether.dev",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: "tether-system", Name: "tether-broker", Path: ptr(testPaths.Path("h", "add-label")), Port: ptr(int32(8443)),
		}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"test.tether.dev"}, APIVersions: []string{"v1"}, Resources: []string{"gadgets"},
				Scope: ptr(admissionregistrationv1.NamespacedScope),
			},
		}},
		FailurePolicy:           ptr(admissionregistrationv1.Ignore),
		MatchPolicy:             ptr(admissionregistrationv1.Equivalent),
		NamespaceSelector:       &metav1.LabelSelector{},
		ObjectSelector:          &metav1.LabelSelector{},
		SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr(int32(10)),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      ptr(admissionregistrationv1.NeverReinvocationPolicy),
	}
	if len(got.validating) != 0 || len(got.mutating) != 1 {
		t.Fatalf("got %d validating and %d mutating webhooks, want 0 and 1", len(got.validating), len(got.mutating))
	}
	if !reflect.DeepEqual(got.mutating[0], want) {
		t.Errorf("webhook:\n got %s\nwant %s", toJSON(t, got.mutating[0]), toJSON(t, want))
	}
}

func TestBuildWebhookFields(t *testing.T) {
	tests := []struct {
		name    string
		binding *binding.Binding
		exclude []string
		check   func(t *testing.T, w admissionregistrationv1.ValidatingWebhook)
	}{{
		name:    "the status subresource",
		binding: admissionBinding("b", func(b *binding.Binding) { b.Admission.Subresource = "status" }),
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			wantStrings(t, "resources", w.Rules[0].Resources, "gadgets/status")
		},
	}, {
		name:    "every subresource",
		binding: admissionBinding("b", func(b *binding.Binding) { b.Admission.Subresource = "*" }),
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			wantStrings(t, "resources", w.Rules[0].Resources, "gadgets", "gadgets/*")
		},
	}, {
		name:    "a cluster-scoped resource",
		binding: admissionBinding("b", func(b *binding.Binding) { b.Resource = clusterGadgets }),
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			if *w.Rules[0].Scope != admissionregistrationv1.ClusterScope {
				t.Errorf("scope %s, want Cluster", *w.Rules[0].Scope)
			}
		},
	}, {
		name: "the core group",
		binding: admissionBinding("b", func(b *binding.Binding) {
			b.Resource.GroupVersionResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
		}),
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			wantStrings(t, "apiGroups", w.Rules[0].APIGroups, "")
			wantStrings(t, "apiVersions", w.Rules[0].APIVersions, "v1")
		},
	}, {
		name:    "a namespace list without a namespace selector",
		binding: admissionBinding("b", func(b *binding.Binding) { b.Namespaces = []string{"one"} }),
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"one"}},
			}}
			if !reflect.DeepEqual(w.NamespaceSelector, want) {
				t.Errorf("namespace selector %s, want %s", toJSON(t, w.NamespaceSelector), toJSON(t, want))
			}
		},
	}, {
		name:    "a STRICT binding while present",
		binding: admissionBinding("b", strict),
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			if *w.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("failure policy %s, want Fail", *w.FailurePolicy)
			}
		},
	}, {
		name:    "excluded users with characters to escape",
		binding: admissionBinding("b"),
		exclude: []string{"a", `b"\c`},
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			want := `!(request.userInfo.username in ["a", "b\"\\c"])`
			if len(w.MatchConditions) != 1 || w.MatchConditions[0].Expression != want {
				t.Errorf("match conditions %s, want one with %s", toJSON(t, w.MatchConditions), want)
			}
		},
	}, {
		name:    "no excluded users and no match conditions",
		binding: admissionBinding("b"),
		check: func(t *testing.T, w admissionregistrationv1.ValidatingWebhook) {
			if w.MatchConditions != nil {
				t.Errorf("match conditions %s, want none", toJSON(t, w.MatchConditions))
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bl := builder{handler: "h", url: "https://broker", paths: testPaths, excludeUsers: tt.exclude}
			got := bl.build([]*binding.Binding{tt.binding}, false)
			if len(got.validating) != 1 {
				t.Fatalf("got %d validating webhooks, want 1", len(got.validating))
			}
			tt.check(t, got.validating[0])
		})
	}
}

func TestTheNamespaceSelectorAlwaysLeavesTheExcludedNamespacesOut(t *testing.T) {
	system := []string{"kube-node-lease", "kube-system", "tether-system"}
	name := func(op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: op, Values: values}
	}
	notSystem := name(metav1.LabelSelectorOpNotIn, system...)
	tests := []struct {
		name     string
		binding  *binding.Binding
		excluded []string
		want     *metav1.LabelSelector
	}{{
		name:    "every namespace, nothing excluded",
		binding: admissionBinding("b"),
		want:    &metav1.LabelSelector{},
	}, {
		name:     "every namespace",
		binding:  admissionBinding("b"),
		excluded: system,
		want:     &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notSystem}},
	}, {
		name:     "a namespace list",
		binding:  admissionBinding("b", func(b *binding.Binding) { b.Namespaces = []string{"a", "b"} }),
		excluded: system,
		want: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			name(metav1.LabelSelectorOpIn, "a", "b"), notSystem,
		}},
	}, {
		name: "the binding's selector, its expressions and labels kept",
		binding: admissionBinding("b", func(b *binding.Binding) {
			b.Admission.NamespaceSelector = &metav1.LabelSelector{
				MatchLabels:      map[string]string{"env": "prod"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists}},
			}
		}),
		excluded: system,
		want: &metav1.LabelSelector{
			MatchLabels: map[string]string{"env": "prod"},
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "team", Operator: metav1.LabelSelectorOpExists}, notSystem,
			},
		},
	}, {
		// Both requirements apply: the binding cannot select an excluded
		// namespace back in by name.
		name: "a binding's selector naming an excluded namespace",
		binding: admissionBinding("b", func(b *binding.Binding) {
			b.Admission.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				name(metav1.LabelSelectorOpIn, "kube-system"),
			}}
		}),
		excluded: system,
		want: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			name(metav1.LabelSelectorOpIn, "kube-system"), notSystem,
		}},
	}, {
		// For Namespaces the API server matches the Namespace's own labels.
		name: "the namespaces resource",
		binding: admissionBinding("b", func(b *binding.Binding) {
			b.Resource = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Kind: "Namespace"}
		}),
		excluded: system,
		want:     &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notSystem}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bl := builder{handler: "h", url: "https://broker", paths: testPaths, excludeNamespaces: tt.excluded}
			d := bl.build([]*binding.Binding{tt.binding, admissionBinding("m", mutate, func(m *binding.Binding) {
				m.Resource, m.Namespaces, m.Admission.NamespaceSelector = tt.binding.Resource, tt.binding.Namespaces, tt.binding.Admission.NamespaceSelector
			})}, false)
			if len(d.validating) != 1 || len(d.mutating) != 1 {
				t.Fatalf("got %d validating and %d mutating webhooks, want 1 and 1", len(d.validating), len(d.mutating))
			}
			for kind, got := range map[string]*metav1.LabelSelector{"validating": d.validating[0].NamespaceSelector, "mutating": d.mutating[0].NamespaceSelector} {
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s namespace selector %s, want %s", kind, toJSON(t, got), toJSON(t, tt.want))
				}
			}
			if sel := tt.binding.Admission.NamespaceSelector; sel != nil && slices.ContainsFunc(sel.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool {
				return r.Operator == metav1.LabelSelectorOpNotIn
			}) {
				t.Error("building changed the binding's namespace selector")
			}
		})
	}
}

func TestBuildKeepsOnlyStrictWebhooksWhenAbsent(t *testing.T) {
	bindings := []*binding.Binding{
		admissionBinding("v-ignore"),
		admissionBinding("v-strict", strict),
		admissionBinding("v-fail", func(b *binding.Binding) { b.Admission.FailurePolicy = binding.FailFail }),
		admissionBinding("m-ignore", mutate),
		admissionBinding("m-strict", mutate, strict),
		{ID: "on-create", Kind: binding.Create, Resource: gadgets},
	}
	tests := []struct {
		name                   string
		bindings               []*binding.Binding
		absent                 bool
		validating, mutating   []string
		failValidating, failMu []bool
	}{{
		name: "present", bindings: bindings,
		validating: []string{"v-ignore.h.tether.dev", "v-strict.h.tether.dev", "v-fail.h.tether.dev"}, failValidating: []bool{false, true, true},
		mutating: []string{"m-ignore.h.tether.dev", "m-strict.h.tether.dev"}, failMu: []bool{false, true},
	}, {
		name: "absent", bindings: bindings, absent: true,
		validating: []string{"v-strict.h.tether.dev"}, failValidating: []bool{true},
		mutating: []string{"m-strict.h.tether.dev"}, failMu: []bool{true},
	}, {
		name: "absent without STRICT bindings", bindings: []*binding.Binding{bindings[0], bindings[2], bindings[3]}, absent: true,
	}, {
		name: "no admission bindings", bindings: bindings[5:],
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := builder{handler: "h", url: "https://broker", paths: testPaths}.build(tt.bindings, tt.absent)
			var vNames, mNames []string
			var vFail, mFail []bool
			for _, w := range d.validating {
				vNames, vFail = append(vNames, w.Name), append(vFail, *w.FailurePolicy == admissionregistrationv1.Fail)
			}
			for _, w := range d.mutating {
				mNames, mFail = append(mNames, w.Name), append(mFail, *w.FailurePolicy == admissionregistrationv1.Fail)
			}
			wantStrings(t, "validating webhooks", vNames, tt.validating...)
			wantStrings(t, "mutating webhooks", mNames, tt.mutating...)
			if !reflect.DeepEqual(vFail, tt.failValidating) || !reflect.DeepEqual(mFail, tt.failMu) {
				t.Errorf("failing closed: validating %v, mutating %v; want %v and %v", vFail, mFail, tt.failValidating, tt.failMu)
			}
		})
	}
}

func wantStrings(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
		t.Errorf("%s %q, want %q", what, got, want)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding %T: %v", v, err)
	}
	return string(b)
}
