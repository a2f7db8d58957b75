package auth

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/resource"
)

var widgets = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}, Namespaced: true}

// spell writes a right as "verb resource[/name] [namespace]".
func spell(r Right) string {
	s := r.Verb + " " + resourceName(r.Resource)
	if r.Name != "" {
		s += "/" + r.Name
	}
	if r.Namespace != "" {
		s += " " + r.Namespace
	}
	return s
}

func TestRights(t *testing.T) {
	bind := func(k binding.Kind, p binding.Policy, namespaces ...string) *binding.Binding {
		return &binding.Binding{ID: fmt.Sprintf("b-%v", k), Kind: k, Policy: p, Resource: widgets, Namespaces: namespaces}
	}
	connect := "connect handlers.tether.dev/h tether"
	tests := []struct {
		name     string
		priority int32
		bindings []*binding.Binding
		want     []string
	}{
		{"no bindings: the name alone", 0, nil, []string{connect}},
		{"a priority above 0 takes over: the takeover grant", 1, nil, []string{connect, "takeover handlers.tether.dev/h tether"}},
		{"an event binding reads", 0, []*binding.Binding{bind(binding.Event, binding.PolicyNone, "a")},
			[]string{connect, "list widgets.v1.test.tether.dev a", "watch widgets.v1.test.tether.dev a"}},
		{"a delete binding that holds writes the finalizer", 0, []*binding.Binding{bind(binding.Delete, binding.PolicyHold, "a")},
			[]string{connect, "list widgets.v1.test.tether.dev a", "watch widgets.v1.test.tether.dev a", "patch widgets.v1.test.tether.dev a"}},
		{"a delete binding without a hold only reads", 0, []*binding.Binding{bind(binding.Delete, binding.PolicyNone, "a")},
			[]string{connect, "list widgets.v1.test.tether.dev a", "watch widgets.v1.test.tether.dev a"}},
		{"a STRICT daemon needs the strict grant, cluster-wide patch", 0, []*binding.Binding{bind(binding.Daemon, binding.PolicyStrict)},
			[]string{connect, "strict handlers.tether.dev/h tether", "list widgets.v1.test.tether.dev", "watch widgets.v1.test.tether.dev", "patch widgets.v1.test.tether.dev"}},
		{"a create binding patches in every namespace it names", 0, []*binding.Binding{bind(binding.Create, binding.PolicyNone, "a", "b")},
			[]string{connect, "list widgets.v1.test.tether.dev a", "watch widgets.v1.test.tether.dev a", "patch widgets.v1.test.tether.dev a",
				"list widgets.v1.test.tether.dev b", "watch widgets.v1.test.tether.dev b", "patch widgets.v1.test.tether.dev b"}},
		{"two bindings on one scope ask once", 0, []*binding.Binding{bind(binding.Create, binding.PolicyNone, "a"), bind(binding.Update, binding.PolicyNone, "a")},
			[]string{connect, "list widgets.v1.test.tether.dev a", "watch widgets.v1.test.tether.dev a", "patch widgets.v1.test.tether.dev a"}},
		{"a validate binding makes the broker write a webhook configuration", 0, []*binding.Binding{bind(binding.Validate, binding.PolicyNone, "a")},
			[]string{connect, "list widgets.v1.test.tether.dev a", "watch widgets.v1.test.tether.dev a",
				"create validatingwebhookconfigurations.v1.admissionregistration.k8s.io"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range Rights("tether", "h", tc.priority, tc.bindings) {
				got = append(got, spell(r))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Rights =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

// TestRightsNameTheBindingThatNeedsThem: an error must point at the Hello
// field to fix.
func TestRightsNameTheBindingThatNeedsThem(t *testing.T) {
	bs := []*binding.Binding{
		{ID: "create", Kind: binding.Create, Resource: widgets},
		{ID: "strict", Kind: binding.Delete, Policy: binding.PolicyStrict, Resource: widgets},
	}
	for _, r := range Rights("tether", "h", 1, bs) {
		switch {
		case r.Verb == VerbConnect && (r.Binding != -1 || r.Field != "handler"):
			t.Errorf("%s: binding %d field %q, want the handler", spell(r), r.Binding, r.Field)
		case r.Verb == VerbTakeover && (r.Binding != -1 || r.Field != "priority"):
			t.Errorf("%s: binding %d field %q, want the priority", spell(r), r.Binding, r.Field)
		case r.Verb == VerbStrict && (r.Binding != 1 || r.Field != "finalizer"):
			t.Errorf("%s: binding %d field %q, want bindings[1].finalizer", spell(r), r.Binding, r.Field)
		case r.Verb == "patch" && r.Binding != 0:
			t.Errorf("%s: binding %d, want the first that needs it", spell(r), r.Binding)
		}
	}
}

// TestBrokerRights: the broker's identity needs to watch what every
// binding names, in its namespaces, and patch only where it writes or
// holds; each right once, named after the first binding that needs it.
func TestBrokerRights(t *testing.T) {
	bs := []*binding.Binding{
		{ID: "events", Kind: binding.Event, Resource: widgets, Namespaces: []string{"a"}},
		{ID: "holds", Kind: binding.Delete, Policy: binding.PolicyHold, Resource: widgets, Namespaces: []string{"a", "b"}},
		{ID: "webhook", Kind: binding.Validate, Resource: widgets},
	}
	var got []string
	for _, r := range BrokerRights(bs) {
		got = append(got, fmt.Sprintf("%s (bindings[%d].%s)", spell(r), r.Binding, r.Field))
	}
	want := []string{
		"list widgets.v1.test.tether.dev a (bindings[0].resource)", "watch widgets.v1.test.tether.dev a (bindings[0].resource)",
		"patch widgets.v1.test.tether.dev a (bindings[1].resource)",
		"list widgets.v1.test.tether.dev b (bindings[1].resource)", "watch widgets.v1.test.tether.dev b (bindings[1].resource)",
		"patch widgets.v1.test.tether.dev b (bindings[1].resource)",
		"list widgets.v1.test.tether.dev (bindings[2].resource)", "watch widgets.v1.test.tether.dev (bindings[2].resource)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("BrokerRights =\n  %q\nwant\n  %q", got, want)
	}
}
