package dispatch

import (
	"time"

	"github.com/tether-dev/tether/broker/binding"
)

// tries is what an object's worker keeps of its bindings' failed attempts
// at what each is delivering: how many each made, and when each that asked
// to be retried is due again. A binding in backoff is passed over until
// then, while the object's other bindings go on; the pass looks again when
// the soonest is due.
type tries struct {
	n  map[string]int
	at map[string]time.Time
}

// attempts is how many attempts binding id made and failed.
func (t *tries) attempts(id string) int { return t.n[id] }

// left is how long binding id is still in backoff at now: zero when it is
// due.
func (t *tries) left(id string, now time.Time) time.Duration {
	at, ok := t.at[id]
	if !ok {
		return 0
	}
	return max(at.Sub(now), 0)
}

// failed records binding id's n-th failed attempt, to be tried again at at.
func (t *tries) failed(id string, n int, at time.Time) {
	if t.n == nil {
		// Made when first written: most bindings never fail.
		t.n, t.at = map[string]int{}, map[string]time.Time{}
	}
	t.n[id], t.at[id] = n, at
}

// end forgets binding id's attempts: it is done, or the broker gave up.
func (t *tries) end(id string) {
	delete(t.n, id)
	delete(t.at, id)
}

func (t *tries) empty() bool { return len(t.n) == 0 }

// triesOf is where binding b's attempts are kept: an event binding's belong
// to the raw event it is delivering, the others' to the cause (resetCause
// forgets them with it).
func (w *objectWork) triesOf(b *binding.Binding) *tries {
	if b.Kind == binding.Event {
		return &w.eventTries
	}
	return &w.tries
}

// sooner is the sooner of two waits, zero standing for none.
func sooner(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
