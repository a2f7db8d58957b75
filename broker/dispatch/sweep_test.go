package dispatch

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/resource"
)

func TestDroppedScopes(t *testing.T) {
	widgets := schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	bind := func(gvr schema.GroupVersionResource, kind binding.Kind, nss ...string) *binding.Binding {
		var r resource.Resource
		r.GroupVersionResource = gvr
		return &binding.Binding{Kind: kind, Resource: r, Namespaces: nss}
	}
	tests := []struct {
		name     string
		old, now []*binding.Binding
		sweep    []presence.Scope
		want     []presence.Scope
	}{
		{"every binding dropped", []*binding.Binding{bind(widgets, binding.Delete, "a")}, nil,
			nil, []presence.Scope{{Resource: widgets, Namespaces: []string{"a"}}}},
		{"same scope", []*binding.Binding{bind(widgets, binding.Delete, "a")},
			[]*binding.Binding{bind(widgets, binding.Create, "a")}, nil, []presence.Scope{}},
		{"a namespace dropped", []*binding.Binding{bind(widgets, binding.Delete, "a", "b")},
			[]*binding.Binding{bind(widgets, binding.Delete, "a")}, nil,
			[]presence.Scope{{Resource: widgets, Namespaces: []string{"b"}}}},
		{"a resource dropped", []*binding.Binding{bind(widgets, binding.Delete), bind(secrets, binding.Timer)},
			[]*binding.Binding{bind(widgets, binding.Delete)}, nil,
			[]presence.Scope{{Resource: secrets}}},
		{"all namespaces narrowed to one", []*binding.Binding{bind(widgets, binding.Delete)},
			[]*binding.Binding{bind(widgets, binding.Delete, "a")}, nil,
			[]presence.Scope{{Resource: widgets}}},
		{"one namespace widened to all", []*binding.Binding{bind(widgets, binding.Delete, "a")},
			[]*binding.Binding{bind(widgets, binding.Delete)}, nil, []presence.Scope{}},
		{"admission bindings watch nothing", []*binding.Binding{bind(widgets, binding.Validate)},
			nil, nil, []presence.Scope{}},
		{"an earlier sweep is kept and merged", []*binding.Binding{bind(widgets, binding.Delete, "a", "b")},
			[]*binding.Binding{bind(widgets, binding.Delete, "a")},
			[]presence.Scope{{Resource: widgets, Namespaces: []string{"c"}}, {Resource: secrets}},
			[]presence.Scope{{Resource: secrets}, {Resource: widgets, Namespaces: []string{"b", "c"}}}},
		{"an earlier sweep the new bindings cover again", nil,
			[]*binding.Binding{bind(secrets, binding.Delete)}, []presence.Scope{{Resource: secrets, Namespaces: []string{"x"}}},
			[]presence.Scope{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dropped(tt.old, tt.sweep, tt.now); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("dropped = %+v, want %+v", got, tt.want)
			}
		})
	}
}
