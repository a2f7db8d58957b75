package dispatch

import (
	"slices"

	"github.com/tether-dev/tether/broker/binding"
)

// stayNote is what a worker publishes of an object's troubles for the
// stuck-hold scan (stuck.go), which runs on another goroutine: the bindings
// retrying and the API server's refusal of the last write. It is replaced,
// never changed, so the scan reads it without the handler's lock; objects
// without trouble have none, and a delivery answered OK only looks at the
// pointer.
type stayNote struct {
	retrying []retryNote
	refused  string
}

// retryNote is a binding's last failed attempt at the object.
type retryNote struct {
	binding string
	event   bool // an event binding's, kept apart from the cause's
	attempt int
	message string
}

// noteRetry publishes binding b's attempt-th failed attempt at o.
func noteRetry(o *object, b *binding.Binding, attempt int, message string) {
	n := cloneNote(o)
	n.retrying = slices.DeleteFunc(n.retrying, func(r retryNote) bool { return r.binding == b.ID })
	n.retrying = append(n.retrying, retryNote{binding: b.ID, event: b.Kind == binding.Event, attempt: attempt, message: message})
	o.stay.Store(n)
}

// noteAnswered forgets binding id's retries at o: it answered, or the
// broker gave up on it.
func noteAnswered(o *object, id string) {
	if o.stay.Load() == nil {
		return
	}
	n := cloneNote(o)
	n.retrying = slices.DeleteFunc(n.retrying, func(r retryNote) bool { return r.binding == id })
	storeNote(o, n)
}

// noteCauseReset forgets the retries of the cause's bindings (resetCause).
func noteCauseReset(o *object) {
	if o.stay.Load() == nil {
		return
	}
	n := cloneNote(o)
	n.retrying = slices.DeleteFunc(n.retrying, func(r retryNote) bool { return !r.event })
	storeNote(o, n)
}

// noteRefused publishes why the API server refused the last write to o,
// or that the last write landed ("").
func noteRefused(o *object, why string) {
	cur := o.stay.Load()
	if cur == nil && why == "" || cur != nil && cur.refused == why {
		return
	}
	n := cloneNote(o)
	n.refused = why
	storeNote(o, n)
}

func cloneNote(o *object) *stayNote {
	n := &stayNote{}
	if cur := o.stay.Load(); cur != nil {
		n.retrying, n.refused = slices.Clone(cur.retrying), cur.refused
	}
	return n
}

func storeNote(o *object, n *stayNote) {
	if len(n.retrying) == 0 && n.refused == "" {
		n = nil
	}
	o.stay.Store(n)
}
