package binding

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func validate(opts ...func(*tetherv1.Binding)) *tetherv1.Binding {
	return pb(append([]func(*tetherv1.Binding){withID("check"), withKind(tetherv1.BindingKind_BINDING_KIND_VALIDATE)}, opts...)...)
}

func withAdmission(a *tetherv1.AdmissionOptions) func(*tetherv1.Binding) {
	return func(b *tetherv1.Binding) { b.Admission = a }
}

func TestAdmissionDefaults(t *testing.T) {
	b := mustCompile(t, validate(), Defaults{})
	a := b.Admission
	if !slices.Equal(a.Operations, []string{OpCreate, OpUpdate}) || a.Timeout != DefaultAdmissionTimeout ||
		a.FailurePolicy != FailIgnore || a.SideEffects != SideEffectsNone || a.Subresource != "" {
		t.Fatalf("defaults: %+v", a)
	}
	if b.Holds() {
		t.Fatal("an admission binding must never hold objects")
	}
}

func TestAdmissionOptionsCompiled(t *testing.T) {
	b := mustCompile(t, validate(
		func(b *tetherv1.Binding) {
			b.LabelSelector = "app=web"
			b.Finalizer = tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT
		},
		withAdmission(&tetherv1.AdmissionOptions{
			Operations: []tetherv1.AdmissionOperation{
				tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE, tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE,
				tetherv1.AdmissionOperation_ADMISSION_OPERATION_CONNECT,
			},
			Subresource:       "status",
			NamespaceSelector: "team in (a,b)",
			MatchConditions:   []*tetherv1.MatchCondition{{Name: "not-system", Expression: `request.userInfo.username != "system:admin"`}},
			Timeout:           durationpb.New(5 * time.Second),
			SideEffects:       tetherv1.SideEffects_SIDE_EFFECTS_NONE_ON_DRY_RUN,
		})), Defaults{})
	a := b.Admission
	if !slices.Equal(a.Operations, []string{OpDelete, OpConnect}) {
		t.Errorf("operations %v", a.Operations)
	}
	if a.FailurePolicy != FailFail {
		t.Errorf("a STRICT binding fails closed, got %q", a.FailurePolicy)
	}
	if got := metav1.FormatLabelSelector(a.ObjectSelector); got != "app=web" {
		t.Errorf("object selector %q", got)
	}
	if got := metav1.FormatLabelSelector(a.NamespaceSelector); got != "team in (a,b)" {
		t.Errorf("namespace selector %q", got)
	}
	if a.Timeout != 5*time.Second || a.SideEffects != SideEffectsNoneOnDryRun || len(a.MatchConditions) != 1 {
		t.Errorf("options %+v", a)
	}
	if !a.Admits(OpDelete, "status") || a.Admits(OpDelete, "") || a.Admits(OpCreate, "status") {
		t.Error("Admits does not follow operations and subresource")
	}
}

func TestAdmissionOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     *tetherv1.Binding
		field string
	}{
		{"options on a create binding", pb(withAdmission(&tetherv1.AdmissionOptions{})), "admission"},
		{"field selector", validate(func(b *tetherv1.Binding) { b.FieldSelector = "metadata.name=x" }), "field_selector"},
		{"timeout too long", validate(withAdmission(&tetherv1.AdmissionOptions{Timeout: durationpb.New(31 * time.Second)})), "admission.timeout"},
		{"timeout in ms", validate(withAdmission(&tetherv1.AdmissionOptions{Timeout: durationpb.New(1500 * time.Millisecond)})), "admission.timeout"},
		{"bad subresource", validate(withAdmission(&tetherv1.AdmissionOptions{Subresource: "Status/x"})), "admission.subresource"},
		{"bad namespace selector", validate(withAdmission(&tetherv1.AdmissionOptions{NamespaceSelector: "a in ("})), "admission.namespace_selector"},
		{"namespace selector on a cluster resource", validate(
			func(b *tetherv1.Binding) { b.Resource = &tetherv1.Resource{Version: "v1", Resource: "namespaces"} },
			withAdmission(&tetherv1.AdmissionOptions{NamespaceSelector: "a=b"})), "admission.namespace_selector"},
		{"bad CEL", validate(withAdmission(&tetherv1.AdmissionOptions{MatchConditions: []*tetherv1.MatchCondition{{Name: "x", Expression: "object.(("}}})), "admission.match_conditions[0].expression"},
		{"empty CEL", validate(withAdmission(&tetherv1.AdmissionOptions{MatchConditions: []*tetherv1.MatchCondition{{Name: "x"}}})), "admission.match_conditions[0].expression"},
		{"duplicate condition", validate(withAdmission(&tetherv1.AdmissionOptions{MatchConditions: []*tetherv1.MatchCondition{
			{Name: "x", Expression: "true"}, {Name: "x", Expression: "true"}}})), "admission.match_conditions[1].name"},
		{"bad condition name", validate(withAdmission(&tetherv1.AdmissionOptions{MatchConditions: []*tetherv1.MatchCondition{{Name: "-x", Expression: "true"}}})), "admission.match_conditions[0].name"},
		{"HOLD", validate(func(b *tetherv1.Binding) { b.Finalizer = tetherv1.FinalizerPolicy_FINALIZER_POLICY_HOLD }), "finalizer"},
		{"STRICT with IGNORE", validate(
			func(b *tetherv1.Binding) { b.Finalizer = tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT },
			withAdmission(&tetherv1.AdmissionOptions{FailurePolicy: tetherv1.FailurePolicy_FAILURE_POLICY_IGNORE})), "admission.failure_policy"},
		{"unknown operation", validate(withAdmission(&tetherv1.AdmissionOptions{Operations: []tetherv1.AdmissionOperation{9}})), "admission.operations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(context.Background(), []*tetherv1.Binding{tc.b}, fakeResolver{}, Defaults{}, allKinds)
			if err == nil || !strings.Contains(err.Error(), "."+tc.field+":") {
				t.Fatalf("want an error on %s, got %v", tc.field, err)
			}
		})
	}
}

func TestAdmissionFingerprintStable(t *testing.T) {
	mk := func() []*Binding {
		return []*Binding{mustCompile(t, validate(func(b *tetherv1.Binding) { b.LabelSelector = "a=b" },
			withAdmission(&tetherv1.AdmissionOptions{NamespaceSelector: "c=d"})), Defaults{})}
	}
	if Fingerprint(mk()) != Fingerprint(mk()) {
		t.Fatal("two compilations of the same admission binding differ in fingerprint")
	}
}

func TestAnAdmissionBindingNamingAnExcludedNamespaceIsRefused(t *testing.T) {
	excluded := []string{"kube-node-lease", "kube-system", "tether-system"}
	in := func(ns ...string) func(*tetherv1.Binding) {
		return func(b *tetherv1.Binding) { b.Namespaces = ns }
	}
	for _, tc := range []struct {
		name     string
		bindings []*tetherv1.Binding
		excluded []string
		refused  string // the index and namespace named; empty: accepted
	}{
		{"every namespace", []*tetherv1.Binding{validate()}, excluded, ""},
		{"ordinary namespaces", []*tetherv1.Binding{validate(in("a", "b"))}, excluded, ""},
		{"kube-system", []*tetherv1.Binding{validate(in("kube-system"))}, excluded, `bindings[0] ("check").namespaces: "kube-system"`},
		{"the broker's namespace among others", []*tetherv1.Binding{
			validate(in("a")), validate(withID("second"), withKind(tetherv1.BindingKind_BINDING_KIND_MUTATE), in("a", "tether-system")),
		}, excluded, `bindings[1] ("second").namespaces: "tether-system"`},
		{"a lifecycle binding in kube-system", []*tetherv1.Binding{pb(in("kube-system"))}, excluded, ""},
		{"nothing excluded", []*tetherv1.Binding{validate(in("kube-system"))}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs, err := Compile(context.Background(), tc.bindings, fakeResolver{}, Defaults{}, allKinds)
			if err != nil {
				t.Fatal(err)
			}
			err = RefuseExcludedNamespaces(bs, tc.excluded)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.refused)):
				t.Fatalf("want a refusal starting %s, got %v", tc.refused, err)
			case tc.refused != "" && !strings.Contains(err.Error(), "--admission-exclude-namespaces"):
				t.Errorf("the refusal does not say how to opt the namespace in: %v", err)
			}
		})
	}
}
