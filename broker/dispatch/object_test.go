package dispatch

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/broker/informer"
)

// TestObjectAtRestOnlyWhenNothingIsUnderWay: the runtime forgets an object
// at rest, so anything still to do for it must keep it.
func TestObjectAtRestOnlyWhenNothingIsUnderWay(t *testing.T) {
	rest := func() *object {
		return &object{uid: "u", obj: &informer.Object{ResourceVersion: "5"}, settled: "5"}
	}
	if !rest().atRest() {
		t.Fatal("a settled object with nothing to do is not at rest")
	}
	for name, change := range map[string]func(*object){
		"a newer state":    func(o *object) { o.obj = &informer.Object{ResourceVersion: "6"} },
		"being deleted":    func(o *object) { o.obj = &informer.Object{ResourceVersion: "5", Deleting: true} },
		"gone":             func(o *object) { o.gone = true },
		"initial":          func(o *object) { o.initial = true },
		"a pending write":  func(o *object) { o.pending = &write{} },
		"a write's turn":   func(o *object) { o.writeAt = time.Now() },
		"a release's turn": func(o *object) { o.releaseAt = time.Now() },
		"a daemon timeout": func(o *object) { o.daemonTimedOut = true },
		"a raw event":      func(o *object) { o.events = []rawEvent{{typ: watchAdded}} },
		"a tick due":       func(o *object) { o.due = dueSet{{name: "t"}} },
		"a daemon exit":    func(o *object) { o.exits = []daemonExit{{}} },
		"a daemon":         func(o *object) { o.daemons = map[string]*daemon{"d": {}} },
		"a timer":          func(o *object) { o.timers = idSet{"t"} },
		"a binding done":   func(o *object) { o.markDone("c") },
		"an attempt":       func(o *object) { o.attempts = map[string]int{"c": 1} },
		"retries given up": func(o *object) { o.gaveUp = map[string]bool{"c": true} },
		"never seen":       func(o *object) { o.obj = nil },
	} {
		o := rest()
		change(o)
		if o.atRest() {
			t.Errorf("at rest with %s", name)
		}
	}
}
