package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// ErrGone is returned by Deliver when the instance left before it acked; the
// caller re-sends the delivery to another instance.
var ErrGone = errors.New("handler instance is gone")

// ErrBroke is wrapped, with ErrGone, by Deliver when the session ended on
// something the instance sent that the broker cannot take (a message over
// the size limit): sending the same delivery to it again would end the
// next session the same way, so the delivery counts as a failed attempt.
var ErrBroke = errors.New("the instance broke its session")

// ErrLeaving is returned by Deliver when the instance said Goodbye: it takes
// no new deliveries.
var ErrLeaving = errors.New("handler instance is leaving")

// Instance is one connected handler process.
type Instance struct {
	Handler   string
	ID        string
	SessionID string
	// User is the identity the instance authenticated as; nil in insecure
	// mode. The broker writes the instance's patches as this user.
	User *authenticationv1.UserInfo
	// Priority is Hello.priority, 0 to tetherv1.MaxPriority: only the
	// instances of the highest priority connected take the handler's work,
	// so that a developer's instance can take over from the in-cluster ones.
	Priority int32
	// Capabilities are Hello.capabilities: what the instance's SDK has. A
	// feature the broker sends the instance (not one it only receives)
	// goes only to an instance that has it, or that lists none (Listed
	// false: an SDK older than capabilities, served as before).
	Capabilities Capabilities

	send chan *tetherv1.ConnectResponse
	done chan struct{} // closed when the session ends

	mu       sync.Mutex
	window   int
	inFlight int
	// reviews says the instance answers admission reviews: then part of
	// its window is kept for them (reviewReserve), so that slow lifecycle
	// work cannot make the API server's reviews time out.
	reviews bool
	// freed is closed whenever a window slot frees, and made anew only
	// when someone waits for the next time (freedLocked): most slots free
	// with nobody waiting.
	freed   chan struct{}
	pending map[string]chan *tetherv1.Ack
	// abandoned are deliveries the instance was told to cancel and has not
	// acked yet: it still holds them, so they keep their window slot.
	abandoned map[string]bool
	leaving   bool
	onExit    func(*tetherv1.DaemonExited)
	// fault is why the instance broke its session, set before done closes.
	fault error
}

func newInstance(handler, id, sessionID string, priority int32, window int, reviews bool) *Instance {
	return &Instance{
		Handler: handler, ID: id, SessionID: sessionID, Priority: priority,
		send:      make(chan *tetherv1.ConnectResponse),
		done:      make(chan struct{}),
		window:    window,
		reviews:   reviews,
		pending:   map[string]chan *tetherv1.Ack{},
		abandoned: map[string]bool{},
	}
}

// Done is closed when the session has ended.
func (in *Instance) Done() <-chan struct{} { return in.done }

// Leaving reports whether the instance said Goodbye.
func (in *Instance) Leaving() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.leaving
}

// InFlight is the number of deliveries awaiting an ack, including those
// cancelled but not yet acked.
func (in *Instance) InFlight() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.inFlight
}

// ErrMoved is returned by DeliverUnless when its abort channel closed
// while the delivery still waited for a window slot: it was never sent.
var ErrMoved = errors.New("delivery withdrawn before it was sent")

// Deliver sends d once a window slot is free and waits for its ack. It
// returns ErrGone or ErrLeaving when the instance cannot answer, and ctx's
// error when ctx ends first; then the instance is told to cancel d.
func (in *Instance) Deliver(ctx context.Context, d *tetherv1.Delivery) (*tetherv1.Ack, error) {
	return in.DeliverUnless(ctx, d, nil, nil)
}

// DeliverUnless is Deliver that gives up with ErrMoved when abort closes
// before a window slot is free (the object may have a new owner by then).
// Once d is sent, only its ack, the instance leaving, or ctx end it. A
// value from expired (nil: never) ends it as ctx's end would, with
// context.DeadlineExceeded: a timer the caller reuses for its deliveries
// costs less than a context with a deadline for each.
func (in *Instance) DeliverUnless(ctx context.Context, d *tetherv1.Delivery, abort <-chan struct{}, expired <-chan time.Time) (*tetherv1.Ack, error) {
	ackc, err := in.acquire(ctx, d.GetId(), d.GetKind() == tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION, abort, expired)
	if err != nil {
		return nil, err
	}
	msg := &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: d}}
	select {
	case in.send <- msg:
	case <-in.done:
		in.release(d.GetId())
		return nil, in.gone()
	case <-ctx.Done():
		in.release(d.GetId())
		return nil, ctx.Err()
	case <-expired:
		in.release(d.GetId())
		return nil, context.DeadlineExceeded
	}
	select {
	case ack := <-ackc:
		in.release(d.GetId())
		return ack, nil
	case <-in.done:
		in.release(d.GetId())
		return nil, in.gone()
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	}
	// The instance still holds d until it acks the cancel, so d keeps its
	// window slot until then.
	in.abandon(d.GetId())
	in.cancel(d.GetId(), "the broker stopped waiting for this delivery")
	return nil, err
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

// acquire waits for a window slot and registers the delivery. A review may
// take any slot; other deliveries leave the review reserve free.
func (in *Instance) acquire(ctx context.Context, id string, review bool, abort <-chan struct{}, expired <-chan time.Time) (chan *tetherv1.Ack, error) {
	for {
		in.mu.Lock()
		limit := in.window
		if in.reviews && !review {
			limit -= reviewReserve(in.window)
		}
		switch {
		case in.leaving:
			in.mu.Unlock()
			return nil, ErrLeaving
		case in.inFlight < limit:
			in.inFlight++
			c := make(chan *tetherv1.Ack, 1)
			in.pending[id] = c
			in.mu.Unlock()
			return c, nil
		}
		freed := in.freedLocked()
		in.mu.Unlock()
		select {
		case <-freed:
		case <-abort:
			return nil, ErrMoved
		case <-in.done:
			return nil, ErrGone
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expired:
			return nil, context.DeadlineExceeded
		}
	}
}

// gone is Deliver's error once the session ended: ErrGone, with ErrBroke
// and why when the instance broke it.
func (in *Instance) gone() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.fault != nil {
		return fmt.Errorf("%w (%w: %v)", ErrGone, ErrBroke, in.fault)
	}
	return ErrGone
}

// broke records why the instance broke its session; the session's end
// must come after it.
func (in *Instance) broke(err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.fault = err
}

func (in *Instance) release(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.pending, id)
	in.inFlight--
	in.wake()
}

// abandon gives up waiting for a delivery that was sent. Its slot is freed
// by the ack that answers the cancel, or now if that ack already came.
func (in *Instance) abandon(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.pending[id]; ok {
		in.abandoned[id] = true
		return
	}
	in.inFlight--
	in.wake()
}

// wake tells waiters that a slot may be free; in.mu must be held.
func (in *Instance) wake() {
	if in.freed != nil {
		close(in.freed)
		in.freed = nil
	}
}

// freedLocked is the channel the next wake closes; in.mu must be held.
func (in *Instance) freedLocked() <-chan struct{} {
	if in.freed == nil {
		in.freed = make(chan struct{})
	}
	return in.freed
}

// cancel tells the instance that a delivery is no longer wanted. It does not
// wait; the instance still acks the delivery, and that ack frees its slot.
func (in *Instance) cancel(id, reason string) {
	msg := &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Cancel{Cancel: &tetherv1.Cancel{DeliveryId: id, Reason: reason}}}
	go func() {
		select {
		case in.send <- msg:
		case <-in.done:
		}
	}()
}

// ack hands an ack to the waiting Deliver. It reports false for an unknown
// delivery id.
func (in *Instance) ack(a *tetherv1.Ack) bool {
	in.mu.Lock()
	c, ok := in.pending[a.GetDeliveryId()]
	if ok {
		delete(in.pending, a.GetDeliveryId())
		if in.abandoned[a.GetDeliveryId()] {
			delete(in.abandoned, a.GetDeliveryId())
			in.inFlight--
			in.wake()
		}
	}
	in.mu.Unlock()
	if ok {
		c <- a // buffered, and only ever sent once
	}
	return ok
}

// OnDaemonExited sets the function told when the instance reports that a
// daemon returned by itself. It runs on the session's receive goroutine and
// must not block.
func (in *Instance) OnDaemonExited(fn func(*tetherv1.DaemonExited)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.onExit = fn
}

func (in *Instance) daemonExited(m *tetherv1.DaemonExited) {
	in.mu.Lock()
	fn := in.onExit
	in.mu.Unlock()
	if fn != nil {
		fn(m)
	}
}

func (in *Instance) setWindow(n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.window = n
	in.wake()
}

// drained reports whether the instance said Goodbye and has nothing in
// flight; when not, it returns a channel that closes at the next change.
func (in *Instance) drained() (bool, <-chan struct{}) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.leaving && in.inFlight == 0 {
		return true, nil
	}
	return false, in.freedLocked()
}

func (in *Instance) setLeaving() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.leaving = true
	in.wake()
}

func (in *Instance) String() string {
	return fmt.Sprintf("%s/%s", in.Handler, in.ID)
}
