package session

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tether-dev/tether/broker/binding"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// FuzzHello feeds Hello messages, as bytes off the wire, to what the broker
// does before it welcomes an instance: the Hello checks and the bindings'
// compilation (selectors, annotation filters, CEL, timers, admission). Any
// input is refused with an error or compiled; nothing crashes.
func FuzzHello(f *testing.F) {
	for _, h := range []*tetherv1.Hello{
		hello().GetHello(),
		hello(func(h *tetherv1.Hello) {
			h.Bindings[0].When = `object.metadata.name.startsWith("a") && has(object.spec)`
			h.Bindings[0].LabelSelector = "app in (a,b),!legacy"
			h.Bindings[0].Namespaces = []string{"a", "b"}
		}).GetHello(),
		hello(func(h *tetherv1.Hello) {
			h.Bindings = append(h.Bindings, &tetherv1.Binding{Id: "check", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE,
				Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}})
		}).GetHello(),
	} {
		data, err := proto.Marshal(h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	s := NewServer(Options{Supported: AllKinds})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h tetherv1.Hello
		if proto.Unmarshal(data, &h) != nil {
			return
		}
		if _, err := s.checkHello(&h); err != nil {
			return
		}
		bs, err := binding.Compile(context.Background(), h.GetBindings(), fakeResolver{}, binding.Defaults{}, AllKinds)
		if err != nil {
			return
		}
		if len(bs) != len(h.GetBindings()) {
			t.Fatalf("%d bindings compiled from %d", len(bs), len(h.GetBindings()))
		}
	})
}
