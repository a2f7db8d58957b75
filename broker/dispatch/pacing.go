package dispatch

import (
	"sync"
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
// a write whose turn finds them all taken comes back when one is likely
// free instead.
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

// The limiters' defaults: every write to the objects at DefaultWriteQPS a
// second in bursts of DefaultWriteBurst, and the writes that strip a
// long-absent handler's holds at DefaultReleaseQPS, in bursts of
// ReleaseBurst of it.
const (
	DefaultWriteQPS   = 100
	DefaultWriteBurst = 200
	DefaultReleaseQPS = 20
)

// ReleaseBurst is the release limiter's burst at qps: two and a half
// seconds' worth, at least one.
func ReleaseBurst(qps float64) int { return max(int(qps*2.5), 1) }

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
// flight, which inTurn gives back once the API server answered.
func (ow *objectWriter) turn(o *object) time.Duration {
	now := ow.opts.Clock.Now()
	if wait := takeTurn(&o.work.writeAt, ow.opts.WriteLimiter, now); wait > 0 {
		return wait
	}
	if ow.inFlight.start() {
		return 0
	}
	// The API server is behind: the handler's places in flight are all
	// taken by writes it has not answered. The write comes back when a
	// place is likely free, and the worker goes on meanwhile.
	o.work.writeAt = ow.inFlight.later(now)
	return o.work.writeAt.Sub(now)
}

// inFlight counts one handler's requests to the API server that are under
// way, up to max (at least 1). The writes that found every place taken come
// back one after the other, a service interval apart: how long a request
// takes, over max, which is how often a place frees. Coming back sooner
// would only find the places taken again, at the cost of a pass each.
type inFlight struct {
	max int

	mu   sync.Mutex
	n    int
	took time.Duration // a request's time, a moving average
	next time.Time     // when the last write sent back comes
}

// minServiceInterval spaces the writes sent back before any request has
// been timed.
const minServiceInterval = time.Millisecond

// start takes a place, unless all are taken.
func (f *inFlight) start() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n >= max(f.max, 1) {
		return false
	}
	f.n++
	return true
}

// done gives back a place start took, for a request that took took.
func (f *inFlight) done(took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.took == 0 {
		f.took = took
	} else {
		f.took += (took - f.took) / 8
	}
}

// later is when a write that found no place at now comes back: a service
// interval after the one sent back before it.
func (f *inFlight) later(now time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next.Before(now) {
		f.next = now
	}
	f.next = f.next.Add(max(f.took/time.Duration(max(f.max, 1)), minServiceInterval))
	return f.next
}

// releaseTurn is turn for stripping the hold of a long-absent handler
// (rule 3d), which the release limiter paces more slowly still.
func (ow *objectWriter) releaseTurn(o *object) time.Duration {
	return takeTurn(&o.work.releaseAt, ow.opts.ReleaseLimiter, ow.opts.Clock.Now())
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
