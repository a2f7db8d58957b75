package dispatch

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/broker/binding"
)

// TestABindingInBackoffIsPassedOverUntilItIsDue: a binding that asked to
// be retried is in backoff until its delay ran out, with its attempts
// counted; the others are not; its end forgets both.
func TestABindingInBackoffIsPassedOverUntilItIsDue(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var tr tries
	if tr.left("a", now) != 0 || tr.attempts("a") != 0 || !tr.empty() {
		t.Fatal("a binding that never failed is in backoff")
	}
	tr.failed("a", 2, now.Add(time.Second), nil)
	for _, tc := range []struct {
		id   string
		at   time.Duration
		want time.Duration
	}{
		{"a", 0, time.Second},
		{"a", 400 * time.Millisecond, 600 * time.Millisecond},
		{"a", time.Second, 0},
		{"a", time.Minute, 0},
		{"b", 0, 0},
	} {
		if got := tr.left(tc.id, now.Add(tc.at)); got != tc.want {
			t.Errorf("%s at +%v: %v left, want %v", tc.id, tc.at, got, tc.want)
		}
	}
	if tr.attempts("a") != 2 || tr.empty() {
		t.Errorf("attempts of a = %d (empty %v), want 2", tr.attempts("a"), tr.empty())
	}
	tr.end("a")
	if tr.left("a", now) != 0 || tr.attempts("a") != 0 || !tr.empty() {
		t.Error("an ended binding is still in backoff")
	}
}

// TestEventBindingsKeepTheirAttemptsApartFromTheCause: a new cause starts
// the lifecycle bindings' attempts afresh, but an event binding's belong
// to the raw event it is retrying.
func TestEventBindingsKeepTheirAttemptsApartFromTheCause(t *testing.T) {
	o := &object{uid: "u"}
	o.begin()
	ev, create := &binding.Binding{ID: "e", Kind: binding.Event}, &binding.Binding{ID: "c", Kind: binding.Create}
	at := time.Now().Add(time.Minute)
	o.work.triesOf(ev).failed(ev.ID, 3, at, nil)
	o.work.triesOf(create).failed(create.ID, 1, at, nil)
	o.resetCause("update/0123")
	if got := o.work.triesOf(create).attempts(create.ID); got != 0 {
		t.Errorf("the create binding's attempts after a new cause: %d, want 0", got)
	}
	if got := o.work.triesOf(ev).attempts(ev.ID); got != 3 {
		t.Errorf("the event binding's attempts after a new cause: %d, want 3", got)
	}
}

func TestSoonerIgnoresNoWait(t *testing.T) {
	for _, tc := range []struct{ a, b, want time.Duration }{
		{0, 0, 0}, {0, time.Second, time.Second}, {time.Second, 0, time.Second},
		{time.Second, time.Minute, time.Second}, {time.Minute, time.Second, time.Second},
	} {
		if got := sooner(tc.a, tc.b); got != tc.want {
			t.Errorf("sooner(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
