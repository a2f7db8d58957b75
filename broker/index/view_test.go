package index

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
)

func obj(uid, app string) *informer.Object {
	return &informer.Object{Namespace: "ns", Name: uid, UID: types.UID(uid),
		Raw: []byte(`{"metadata":{"name":"` + uid + `","namespace":"ns","labels":{"app":"` + app + `"}}}`)}
}

func TestAnIndexViewSendsWhatEntersChangesInAndLeavesIt(t *testing.T) {
	sel, err := labels.Parse("app=web")
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		name string
		do   func(v *view)
		want string // the event type queued; "" for none
	}
	steps := []step{
		{"a matching object enters", func(v *view) { v.saw(obj("a", "web"), false) }, added},
		{"it changes and still matches", func(v *view) { v.saw(obj("a", "web"), false) }, modified},
		{"it stops matching and leaves", func(v *view) { v.saw(obj("a", "db"), false) }, deleted},
		{"a change outside the view is not sent", func(v *view) { v.saw(obj("a", "db"), false) }, ""},
		{"it matches again and enters", func(v *view) { v.saw(obj("a", "web"), false) }, added},
		{"it is deleted", func(v *view) { v.saw(obj("a", "web"), true) }, deleted},
		{"a deletion outside the view is not sent", func(v *view) { v.saw(obj("b", "db"), true) }, ""},
	}
	v := &view{b: &binding.Binding{ID: "idx", Kind: binding.Index, Labels: sel}, q: &queue{wake: make(chan struct{}, 1)},
		in: map[string]bool{}}
	for _, s := range steps {
		s.do(v)
		got := v.q.take()
		switch {
		case s.want == "" && len(got) != 0:
			t.Fatalf("%s: queued %v, want nothing", s.name, got)
		case s.want != "" && (len(got) != 1 || got[0].GetEventType() != s.want || got[0].GetBindingId() != "idx"):
			t.Fatalf("%s: queued %v, want one %s", s.name, got, s.want)
		}
	}
}
