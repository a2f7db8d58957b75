package dispatch

import (
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
)

// TestRawEventsLeaveTheQueueOnceEveryEventBindingFinishedThem: a binding
// ahead of another (which is in backoff) does not lose its place; the
// queue keeps what the one behind still needs, numbers new events after
// them even when the oldest is dropped for room, and starts afresh once
// empty.
func TestRawEventsLeaveTheQueueOnceEveryEventBindingFinishedThem(t *testing.T) {
	bindings := []*binding.Binding{{ID: "a", Kind: binding.Event}, {ID: "b", Kind: binding.Event}, {ID: "c", Kind: binding.Create}}
	o := &object{uid: "u"}
	o.begin()
	see := func(rv string) {
		o.see(&informer.Object{UID: "u", ResourceVersion: rv}, watchModified, false, true, 3, o.changed, hclog.NewNullLogger())
	}
	queued := func() []uint64 {
		var seqs []uint64
		for _, ev := range o.events {
			seqs = append(seqs, ev.seq)
		}
		return seqs
	}
	see("1")
	see("2")
	see("3")
	o.work.eventNext = map[string]uint64{"a": 3, "b": 1} // b is retrying 1
	o.dropFinishedRaw(bindings)
	if got := queued(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("queued after a finished all and b the first: %v, want [1 2]", got)
	}
	if ev, ok := o.rawEventFrom(o.work.eventNext["a"]); ok {
		t.Errorf("a, ahead, is given event %d again", ev.seq)
	}
	see("4")
	see("5") // past the bound of 3: the oldest goes
	if got := queued(); !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Fatalf("queued after two more with room for 3: %v, want [2 3 4]", got)
	}
	if ev, _ := o.rawEventFrom(o.work.eventNext["b"]); ev.seq != 2 {
		t.Errorf("b, whose event was dropped, is given event %d, want 2", ev.seq)
	}
	if ev, _ := o.rawEventFrom(o.work.eventNext["a"]); ev.seq != 3 {
		t.Errorf("a is given event %d, want 3", ev.seq)
	}
	o.work.eventNext = map[string]uint64{"a": 5, "b": 5}
	o.dropFinishedRaw(bindings)
	if len(o.events) != 0 || o.work.eventNext != nil {
		t.Fatalf("all finished: %d events queued, places %v", len(o.events), o.work.eventNext)
	}
	see("6")
	if got := queued(); !slices.Equal(got, []uint64{0}) {
		t.Errorf("queued after an empty queue: %v, want [0]", got)
	}
}
