package dispatch

import (
	"time"

	"github.com/tether-dev/tether/broker/binding"
)

// tries is what an object's worker keeps of its bindings' failed attempts
// at what each is delivering: how many each made, when each that asked to
// be retried is due again, and the progress its last attempt reported. A binding in backoff is passed over until
// then, while the object's other bindings go on; the pass looks again when
// the soonest is due.
type tries struct {
	byID map[string]try
}

// try is one binding's failed attempts: how many, when it is due again,
// and the last one's Ack.progress (the handler's own record of how far it
// got, sent back with the next attempt; in memory only).
type try struct {
	n        int
	due      time.Time
	progress []byte
}

// attempts is how many attempts binding id made and failed.
func (t *tries) attempts(id string) int { return t.byID[id].n }

// left is how long binding id is still in backoff at now: zero when it is
// due (or never failed: due is then the zero time).
func (t *tries) left(id string, now time.Time) time.Duration {
	return max(t.byID[id].due.Sub(now), 0)
}

// progress is what binding id's last failed attempt reported of how far
// it got: nil when none did.
func (t *tries) progress(id string) []byte { return t.byID[id].progress }

// failed records binding id's n-th failed attempt, to be tried again at
// due, with the progress it reported (nil: none).
func (t *tries) failed(id string, n int, due time.Time, progress []byte) {
	if t.byID == nil {
		// Made when first written: most bindings never fail.
		t.byID = map[string]try{}
	}
	t.byID[id] = try{n: n, due: due, progress: progress}
}

// end forgets binding id's attempts: it is done, or the broker gave up.
func (t *tries) end(id string) { delete(t.byID, id) }

func (t *tries) empty() bool { return len(t.byID) == 0 }

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
