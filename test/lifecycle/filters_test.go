package lifecycle

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

func secret(ns, name string, labels, annotations map[string]string, typ string) *unstructured.Unstructured {
	s := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"stringData": map[string]any{"k": "v"},
	}}
	if typ != "" {
		s.Object["type"] = typ
	}
	s.SetLabels(labels)
	s.SetAnnotations(annotations)
	return s
}

// TestFiltersSelectWhichSecretsAreDelivered gives each filter kind its own
// create binding on Secrets and checks that exactly the matching Secrets
// reach each one. A last binding with no filter sees them all, which tells
// the test when every Secret has been looked at.
func TestFiltersSelectWhichSecretsAreDelivered(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.Dynamic(t)
	ns, other := cp.Namespace(t), cp.Namespace(t)
	addr := startBroker(t, cp)

	journals := map[string]*journal{}
	h := sdk.New("filters", handlerOpts(t)...)
	bind := func(id string, opts ...sdk.BindingOption) {
		j := &journal{}
		journals[id] = j
		h.OnCreate(secrets, j.record(nil), append([]sdk.BindingOption{sdk.ID(id), sdk.Namespaces(ns, other)}, opts...)...)
	}
	bind("labels", sdk.Labels("app=web,tier!=cache"))
	bind("fields", sdk.Fields("type=example.com/special"))
	bind("name", sdk.Fields("metadata.name=by-name"))
	bind("present", sdk.AnnotationPresent("example.com/watch"))
	bind("absent", sdk.AnnotationAbsent("example.com/skip"))
	bind("equals", sdk.AnnotationEquals("example.com/mode", "on"))
	bind("cel", sdk.When(`has(object.metadata.labels) && "size" in object.metadata.labels && int(object.metadata.labels["size"]) > 10`))
	j := &journal{}
	journals["only-other"] = j
	h.OnCreate(secrets, j.record(nil), sdk.ID("only-other"), sdk.Namespaces(other))
	bind("all")
	runHandler(t, h, addr)

	cases := []struct {
		ns, name    string
		labels      map[string]string
		annotations map[string]string
		typ         string
		want        []string // binding ids that must see it, besides "all"
	}{
		{ns: ns, name: "web", labels: map[string]string{"app": "web"}, want: []string{"labels", "absent"}},
		{ns: ns, name: "web-cache", labels: map[string]string{"app": "web", "tier": "cache"}, want: []string{"absent"}},
		{ns: ns, name: "special", typ: "example.com/special", want: []string{"fields", "absent"}},
		{ns: ns, name: "by-name", want: []string{"name", "absent"}},
		{ns: ns, name: "watched", annotations: map[string]string{"example.com/watch": ""}, want: []string{"present", "absent"}},
		{ns: ns, name: "skipped", annotations: map[string]string{"example.com/skip": "yes"}, want: nil},
		{ns: ns, name: "mode-on", annotations: map[string]string{"example.com/mode": "on"}, want: []string{"equals", "absent"}},
		{ns: ns, name: "mode-off", annotations: map[string]string{"example.com/mode": "off"}, want: []string{"absent"}},
		{ns: ns, name: "big", labels: map[string]string{"size": "42"}, want: []string{"cel", "absent"}},
		{ns: ns, name: "small", labels: map[string]string{"size": "2"}, want: []string{"absent"}},
		{ns: other, name: "elsewhere", want: []string{"absent", "only-other"}},
	}
	for _, c := range cases {
		create(t, dyn, secretsGVR, secret(c.ns, c.name, c.labels, c.annotations, c.typ))
	}
	for _, c := range cases {
		journals["all"].waitCount(t, sdk.Create, c.name, 1)
	}
	for _, c := range cases {
		for id, j := range journals {
			if id == "all" {
				continue
			}
			got := len(j.find(sdk.Create, c.name))
			want := 0
			if slices.Contains(c.want, id) {
				want = 1
			}
			if got != want {
				t.Errorf("secret %s, binding %q: delivered %d times, want %d", c.name, id, got, want)
			}
		}
	}
	// No binding here holds: no Secret may carry the hold.
	for _, c := range cases {
		if obj := get(t, dyn, secretsGVR, c.ns, c.name); hold.Has(obj, "filters") {
			t.Errorf("secret %s is held by a handler without delete bindings", c.name)
		}
	}
}
