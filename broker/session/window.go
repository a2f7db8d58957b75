package session

import (
	"context"
	"sync"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// window is one instance's flow control: the deliveries it holds at once
// (sent and not acked, or told to cancel and not acked) stay within its
// window, part of which is kept for admission reviews when it answers them,
// and it takes none once it said Goodbye. A delivery waits for a slot
// without taking one. The zero value is a window of no slot.
type window struct {
	mu       sync.Mutex
	size     int
	inFlight int
	// reviews says the instance answers admission reviews: then part of
	// its window is kept for them (reviewReserve), so that slow lifecycle
	// work cannot make the API server's reviews time out.
	reviews bool
	// freed is closed whenever a slot frees, and made anew only when
	// someone waits for the next time (freedLocked): most slots free with
	// nobody waiting.
	freed   chan struct{}
	pending map[string]chan answer
	// abandoned are deliveries the instance was told to cancel and has not
	// acked yet: it still holds them, so they keep their slot.
	abandoned map[string]bool
	leaving   bool
}

// answer ends a delivery's wait for its ack: the ack, or err when the
// sender kept the delivery unsent (the fence said no).
type answer struct {
	ack *tetherv1.Ack
	err error
}

// reviewReserve is how much of a window of n is kept for admission reviews
// on an instance that answers them: a quarter, at least one slot, and none
// of a window of one (which lifecycle work could not share).
func reviewReserve(n int) int {
	if n < 2 {
		return 0
	}
	return max(1, n/4)
}

// acquire waits for a slot and registers delivery id, whose answer comes
// on the channel returned. A review may take any slot; other deliveries leave
// the review reserve free. It gives up with ErrMoved when abort closes,
// ErrGone when gone does (the session ended), ctx's error, or
// context.DeadlineExceeded when expired fires; ErrLeaving once the
// instance said Goodbye.
func (w *window) acquire(ctx context.Context, id string, review bool, abort, gone <-chan struct{}, expired <-chan time.Time) (chan answer, error) {
	for {
		w.mu.Lock()
		limit := w.size
		if w.reviews && !review {
			limit -= reviewReserve(w.size)
		}
		switch {
		case w.leaving:
			w.mu.Unlock()
			return nil, ErrLeaving
		case w.inFlight < limit:
			w.inFlight++
			c := make(chan answer, 1)
			if w.pending == nil {
				w.pending = map[string]chan answer{}
			}
			w.pending[id] = c
			w.mu.Unlock()
			return c, nil
		}
		freed := w.freedLocked()
		w.mu.Unlock()
		select {
		case <-freed:
		case <-abort:
			return nil, ErrMoved
		case <-gone:
			return nil, ErrGone
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expired:
			return nil, context.DeadlineExceeded
		}
	}
}

// release frees the slot of delivery id, answered or never sent.
func (w *window) release(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, id)
	w.inFlight--
	w.wakeLocked()
}

// abandon gives up waiting for a delivery that was sent. Its slot is freed
// by the ack that answers the cancel, or now if that ack already came.
func (w *window) abandon(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pending[id]; ok {
		if w.abandoned == nil {
			w.abandoned = map[string]bool{}
		}
		w.abandoned[id] = true
		return
	}
	w.inFlight--
	w.wakeLocked()
}

// ack hands a to the delivery waiting for it, and frees the slot of one
// that was abandoned. It reports false for an unknown delivery id.
func (w *window) ack(a *tetherv1.Ack) bool {
	return w.answer(a.GetDeliveryId(), answer{ack: a})
}

// unsent answers delivery id with err: the sender kept it back, so no ack
// will come. Like an ack, it frees the slot of one that was abandoned.
func (w *window) unsent(id string, err error) {
	w.answer(id, answer{err: err})
}

// holds says whether the instance holds delivery id: it was handed to the
// sender and has not been answered.
func (w *window) holds(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.pending[id]
	return ok
}

func (w *window) answer(id string, a answer) bool {
	w.mu.Lock()
	c, ok := w.pending[id]
	if ok {
		delete(w.pending, id)
		if w.abandoned[id] {
			delete(w.abandoned, id)
			w.inFlight--
			w.wakeLocked()
		}
	}
	w.mu.Unlock()
	if ok {
		c <- a // buffered, and only ever sent once
	}
	return ok
}

// resize sets the window to n, as the instance's FlowControl asks.
func (w *window) resize(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.size = n
	w.wakeLocked()
}

// leave takes no more deliveries: the instance said Goodbye.
func (w *window) leave() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leaving = true
	w.wakeLocked()
}

func (w *window) isLeaving() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leaving
}

// held is the number of deliveries the instance holds: awaiting an ack,
// including those cancelled but not yet acked.
func (w *window) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inFlight
}

// alone says whether the instance holds at most one delivery (the one
// being sent) and has a slot free for another lifecycle delivery.
func (w *window) alone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	limit := w.size
	if w.reviews {
		limit -= reviewReserve(w.size)
	}
	return w.inFlight <= 1 && w.inFlight < limit
}

// drained reports whether the instance said Goodbye and holds nothing;
// when not, it returns a channel that closes at the next change.
func (w *window) drained() (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.leaving && w.inFlight == 0 {
		return true, nil
	}
	return false, w.freedLocked()
}

// wakeLocked tells waiters that a slot may be free; w.mu must be held.
func (w *window) wakeLocked() {
	if w.freed != nil {
		close(w.freed)
		w.freed = nil
	}
}

// freedLocked is the channel the next wake closes; w.mu must be held.
func (w *window) freedLocked() <-chan struct{} {
	if w.freed == nil {
		w.freed = make(chan struct{})
	}
	return w.freed
}
