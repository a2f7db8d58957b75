package dispatch

import "time"

// result is what one step of a pass leaves for the queue, as one value: go
// on, look again after a delay (a binding in backoff, a write waiting for
// its turn), look again with the queue's rate limit (err: a refused write,
// a failed read), or let go of the object until something else queues it
// (cut). A wait is not an error: only err is rate limited.
type result struct {
	// after is how soon the object is looked at again; zero: no wait.
	after time.Duration
	// err is what went wrong, wrapped with what was being done.
	err error
	// cut says why the pass was cut short by something that queues the
	// object again by itself; zero: it was not.
	cut cut
}

// cut is why a pass ended early without a wait or an error: what ended it
// queues the object again, so the queue forgets it meanwhile.
type cut uint8

const (
	notCut cut = iota
	// cutAbsent: the handler went past its grace while the pass waited for
	// an instance. Its return looks at every object again.
	cutAbsent
	// cutChanged: the informer saw the object change while the pass waited
	// for an instance; its notification queued the object again.
	cutChanged
)

// goOn is the result of a step that finished: the pass goes on.
var goOn result

// lookAgainIn is a result that looks again in d (none when d is zero).
func lookAgainIn(d time.Duration) result { return result{after: d} }

// failedWith is a result retried with the queue's rate limit (none when
// err is nil).
func failedWith(err error) result { return result{err: err} }

// stops reports whether the pass must end with r: it waits, failed or was
// cut short.
func (r result) stops() bool { return r.after > 0 || r.err != nil || r.cut != notCut }

// aborts reports whether r ends the pass whatever else is due: it failed
// or was cut short. A wait does not: the pass goes on past a binding in
// backoff.
func (r result) aborts() bool { return r.err != nil || r.cut != notCut }

// sooner is r, or w when r is done and w waits: the pass went on past a
// binding in backoff, and must look again when it is due.
func (r result) sooner(w time.Duration) result {
	if r.err != nil || r.cut != notCut {
		return r
	}
	r.after = sooner(r.after, w)
	return r
}
