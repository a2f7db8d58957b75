package dispatch

import (
	"sync"
	"sync/atomic"
	"time"
)

// WriteLimiter paces the dispatcher's writes to the API server: at most qps
// a second on average, in bursts of at most burst. It never blocks. A write
// reserves the next free turn; when the turn is later, the write stays
// pending on its object and the worker moves on to other objects until the
// turn comes. A client-side limiter in the REST client would instead hold
// the worker inside the request, and with enough writes waiting every
// worker of the handler is held there, so deliveries that write nothing
// (timer ticks, most of all) wait N/qps seconds behind them.
//
// The rate alone does not keep workers free when the API server answers
// more slowly than qps allows: the writes whose turn came would then hold
// every worker inside its request, and ticks would wait behind them again.
// So a handler also has at most half its workers in requests (inFlight);
// a write whose turn finds them all taken takes a later turn instead.
//
// One WriteLimiter is shared by every handler of a broker.
type WriteLimiter struct {
	interval time.Duration // between two turns at the steady rate
	ahead    time.Duration // how far a burst may run ahead of the steady rate

	mu sync.Mutex
	// next is when the next turn comes at the steady rate (GCRA's
	// theoretical arrival time).
	next time.Time
}

// NewWriteLimiter returns a limiter of qps writes a second with bursts of
// burst (at least 1). A qps of zero or less does not limit.
func NewWriteLimiter(qps float64, burst int) *WriteLimiter {
	if qps <= 0 {
		return &WriteLimiter{}
	}
	interval := time.Duration(float64(time.Second) / qps)
	return &WriteLimiter{interval: interval, ahead: time.Duration(max(burst, 1)-1) * interval}
}

// reserve takes the next free turn and returns when it is: now, or later.
func (l *WriteLimiter) reserve(now time.Time) time.Time {
	if l.interval <= 0 {
		return now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next.Before(now) {
		l.next = now
	}
	at := l.next.Add(-l.ahead)
	if at.Before(now) {
		at = now
	}
	l.next = l.next.Add(l.interval)
	return at
}

// turn says how long o's next write must still wait for its turn. The
// object keeps its reservation across passes, so coming back early (an
// informer event, a tick) neither loses its place nor takes a second turn.
// Zero means the write may go now: it uses the turn and takes a place in
// flight, which the caller gives back with ow.inFlight.done once the API
// server answered.
func (ow *objectWriter) turn(o *object) time.Duration {
	l, now := ow.opts.WriteLimiter, ow.opts.Clock.Now()
	if wait := takeTurn(&o.writeAt, l, now); wait > 0 {
		return wait
	}
	if ow.inFlight.start() {
		return 0
	}
	// The API server is behind: the handler's places in flight are all
	// taken by writes it has not answered. A later turn keeps the worker
	// free for deliveries meanwhile.
	o.writeAt = l.reserve(now)
	return max(o.writeAt.Sub(now), busyAgain)
}

// busyAgain is the least a write waits when it found no place in flight.
const busyAgain = 10 * time.Millisecond

// inFlight counts one handler's requests to the API server that are under
// way, up to max (at least 1).
type inFlight struct {
	n   atomic.Int32
	max int32
}

// start takes a place, unless all are taken.
func (f *inFlight) start() bool {
	if f.n.Add(1) > max(f.max, 1) {
		f.n.Add(-1)
		return false
	}
	return true
}

// done gives back a place start took.
func (f *inFlight) done() { f.n.Add(-1) }

// releaseTurn is turn for stripping the hold of a long-absent handler
// (rule 3d), which the release limiter paces more slowly still.
func (ow *objectWriter) releaseTurn(o *object) time.Duration {
	return takeTurn(&o.releaseAt, ow.opts.ReleaseLimiter, ow.opts.Clock.Now())
}

// takeTurn reserves a turn of l in *at unless one is held, and says how long
// after now it is still away; zero uses it up.
func takeTurn(at *time.Time, l *WriteLimiter, now time.Time) time.Duration {
	if at.IsZero() {
		*at = l.reserve(now)
	}
	if wait := at.Sub(now); wait > 0 {
		return wait
	}
	*at = time.Time{}
	return 0
}
