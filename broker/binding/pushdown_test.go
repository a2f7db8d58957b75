package binding

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/tether-dev/tether/broker/resource"
)

func TestPushdownIsWhatEveryBindingOfTheResourceRequires(t *testing.T) {
	widgets := resource.Resource{}
	widgets.Group, widgets.Version, widgets.Resource = "test.tether.dev", "v1", "widgets"
	secrets := resource.Resource{}
	secrets.Version, secrets.Resource = "v1", "secrets"
	b := func(kind Kind, r resource.Resource, selector string) *Binding {
		sel, err := labels.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		return &Binding{Kind: kind, Resource: r, Labels: sel}
	}
	for _, tc := range []struct {
		name     string
		bindings []*Binding
		want     string
	}{
		{"one binding", []*Binding{b(Create, widgets, "app=a,tier in (x,y)")}, "app=a,tier in (x,y)"},
		{"shared requirements only", []*Binding{b(Create, widgets, "app=a,tier=x"), b(Delete, widgets, "tier=x,keep")}, "tier=x"},
		{"a binding without a selector", []*Binding{b(Create, widgets, "app=a"), b(Timer, widgets, "")}, ""},
		{"nothing shared", []*Binding{b(Create, widgets, "app=a"), b(Delete, widgets, "app=b")}, ""},
		{"other resources do not count", []*Binding{b(Create, widgets, "app=a"), b(Create, secrets, "")}, "app=a"},
		{"admission bindings do not count", []*Binding{b(Create, widgets, "app=a"), b(Validate, widgets, "")}, "app=a"},
		{"no binding of the resource", []*Binding{b(Create, secrets, "app=a")}, ""},
		{"set requirements must be the same set", []*Binding{b(Create, widgets, "tier in (x,y)"), b(Delete, widgets, "tier in (y,x)")}, "tier in (x,y)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Pushdown(tc.bindings, widgets.GroupVersionResource).String(); got != tc.want {
				t.Errorf("Pushdown = %q, want %q", got, tc.want)
			}
		})
	}
}
