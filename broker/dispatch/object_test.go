package dispatch

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/broker/informer"
)

// TestObjectAtRestOnlyWhenNothingIsUnderWay: the controller forgets an object
// at rest, so anything still to do for it must keep it.
func TestObjectAtRestOnlyWhenNothingIsUnderWay(t *testing.T) {
	rest := func() *object {
		return &object{uid: "u", observed: observed{obj: &informer.Object{ResourceVersion: "5"}}, settled: "5", work: &objectWork{}}
	}
	if !rest().atRest() {
		t.Fatal("a settled object with nothing to do is not at rest")
	}
	onlyCause, noWork := rest(), rest()
	onlyCause.work.cause = "create/0123"
	noWork.work = nil
	if !onlyCause.atRest() {
		t.Fatal("a settled object with only a cause, nothing done for it, is not at rest")
	}
	if !noWork.atRest() {
		t.Fatal("a settled object without work is not at rest")
	}
	for name, change := range map[string]func(*object){
		"a newer state":      func(o *object) { o.obj = &informer.Object{ResourceVersion: "6"} },
		"being deleted":      func(o *object) { o.obj = &informer.Object{ResourceVersion: "5", Deleting: true} },
		"gone":               func(o *object) { o.gone = true },
		"initial":            func(o *object) { o.initial = true },
		"a pending write":    func(o *object) { o.work.pending = &write{} },
		"a write's turn":     func(o *object) { o.work.writeAt = time.Now() },
		"a release's turn":   func(o *object) { o.work.releaseAt = time.Now() },
		"a daemon timeout":   func(o *object) { o.daemonTimedOut = true },
		"a raw event":        func(o *object) { o.events = []rawEvent{{typ: watchAdded}} },
		"a tick due":         func(o *object) { o.due = dueSet{{name: "t"}} },
		"a daemon exit":      func(o *object) { o.exits = []daemonExit{{}} },
		"a daemon":           func(o *object) { o.daemons = map[string]*daemon{"d": {}} },
		"a timer":            func(o *object) { o.timers = idSet{"t"} },
		"a binding done":     func(o *object) { o.markDone("c") },
		"an attempt":         func(o *object) { o.work.tries.failed("c", 1, time.Now(), nil) },
		"an event's attempt": func(o *object) { o.work.eventTries.failed("e", 1, time.Now(), nil) },
		"an event done":      func(o *object) { o.work.eventNext = map[string]uint64{"e": 1} },
		"retries given up":   func(o *object) { o.work.gaveUp = map[string]bool{"c": true} },
		"never seen":         func(o *object) { o.obj = nil },
	} {
		o := rest()
		change(o)
		if o.atRest() {
			t.Errorf("at rest with %s", name)
		}
	}
}

// TestPassKeepsItsWorkOnlyWhenALaterPassNeedsIt: an object kept between
// passes (a timer's) keeps no work once its change is handled, and keeps
// what is done for a change still being handled.
func TestPassKeepsItsWorkOnlyWhenALaterPassNeedsIt(t *testing.T) {
	o := &object{uid: "u"}
	o.begin()
	o.resetCause("create/0123")
	o.work.lastHandled = map[string]any{"spec": "x"}
	o.endPass()
	if o.work != nil {
		t.Fatalf("work kept after a pass that left nothing done: %+v", o.work)
	}

	o.begin()
	o.resetCause("create/0123")
	o.markDone("c")
	o.endPass()
	if o.work == nil || !o.work.done["c"] {
		t.Fatal("work dropped while a binding is done with a change still being handled")
	}
	o.begin()
	if o.resetCause("create/0123"); !o.work.done["c"] {
		t.Fatal("the next pass of the same change does not find the binding done")
	}
	o.resetCause("")
	o.endPass()
	if o.work != nil {
		t.Fatalf("work kept after the change was handled: %+v", o.work)
	}
}
