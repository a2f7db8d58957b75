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

// ErrFenced is returned by Deliver, wrapping the fence's error, when the
// fence (Options.Fence) kept a delivery unsent: this broker may no longer
// do the work it carries.
var ErrFenced = errors.New("delivery fenced off")

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

	send  chan *tetherv1.ConnectResponse
	done  chan struct{} // closed when the session ends
	win   window
	fence func() error // Options.Fence; nil: none
	// linger is how long the sender waits with a lifecycle delivery for
	// more to send with it (Options.BatchLinger); 0: none.
	linger time.Duration

	mu     sync.Mutex
	onExit func(*tetherv1.DaemonExited)
	// fault is why the instance broke its session, set before done closes.
	fault error
}

func newInstance(handler, id, sessionID string, priority int32, size int, reviews bool) *Instance {
	return &Instance{
		Handler: handler, ID: id, SessionID: sessionID, Priority: priority,
		send: make(chan *tetherv1.ConnectResponse),
		done: make(chan struct{}),
		win:  window{size: size, reviews: reviews},
	}
}

// Done is closed when the session has ended.
func (in *Instance) Done() <-chan struct{} { return in.done }

// Leaving reports whether the instance said Goodbye.
func (in *Instance) Leaving() bool { return in.win.isLeaving() }

// InFlight is the number of deliveries awaiting an ack, including those
// cancelled but not yet acked.
func (in *Instance) InFlight() int { return in.win.held() }

// ErrMoved is returned by DeliverUnless when its abort channel closed
// while the delivery still waited for a window slot: it was never sent.
var ErrMoved = errors.New("delivery withdrawn before it was sent")

// Deliver sends d once a window slot is free and waits for its ack. It
// returns ErrGone or ErrLeaving when the instance cannot answer, ErrFenced
// when the fence kept d unsent, and ctx's error when ctx ends first; then
// the instance is told to cancel d.
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
	ackc, err := in.win.acquire(ctx, d.GetId(), isReview(d), abort, in.done, expired)
	if err != nil {
		return nil, err
	}
	// The fence is the sender's to check (sendable), as it writes d.
	msg := &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: d}}
	select {
	case in.send <- msg:
	case <-in.done:
		in.win.release(d.GetId())
		return nil, in.gone()
	case <-ctx.Done():
		in.win.release(d.GetId())
		return nil, ctx.Err()
	case <-expired:
		in.win.release(d.GetId())
		return nil, context.DeadlineExceeded
	}
	select {
	case a := <-ackc:
		in.win.release(d.GetId())
		return a.ack, a.err
	case <-in.done:
		in.win.release(d.GetId())
		return nil, in.gone()
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	}
	// The instance still holds d until it acks the cancel, so d keeps its
	// window slot until then.
	in.win.abandon(d.GetId())
	in.cancel(d.GetId(), "the broker stopped waiting for this delivery")
	return nil, err
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

func (in *Instance) String() string {
	return fmt.Sprintf("%s/%s", in.Handler, in.ID)
}
