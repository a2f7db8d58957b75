package broker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/utils/clock"
)

// errTenureLapsed: the leader's own clock says its Lease may be another's.
var errTenureLapsed = errors.New("this replica's tenure as leader may have ended")

// tenure is how long this replica may go on acting as the leader by its own
// clock: until the renew deadline has passed since it sent its last write
// of the Lease that succeeded. A follower takes the Lease only after it
// has seen it unrenewed for the whole lease duration, which is longer, so
// a leader that looks at its tenure before each send sends nothing once
// the Lease may be another's. Its elector would stop it too, but only
// when it next runs: a process frozen past its Lease (SIGSTOP, a stalled
// VM) wakes with timers due and its elector one goroutine among many.
// The clock is monotonic, so a freeze shows as time passed.
type tenure struct {
	clock  clock.PassiveClock
	length time.Duration // the renew deadline
	log    hclog.Logger

	mu     sync.Mutex
	since  time.Time // when the last write that succeeded was sent; zero: none
	warned bool      // a lapse since was logged
}

// renewed records a write of the Lease, sent at sent, that succeeded.
func (t *tenure) renewed(sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.since, t.warned = sent, false
}

// end is the tenure given up: the Lease is being released.
func (t *tenure) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.since = time.Time{}
}

// check is nil while the tenure lasts (session.Options.Fence).
func (t *tenure) check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.since.IsZero() {
		return fmt.Errorf("%w: it holds no Lease", errTenureLapsed)
	}
	ago := t.clock.Since(t.since)
	if ago < t.length {
		return nil
	}
	if !t.warned {
		t.warned = true
		t.log.Warn("the leader Lease may be another replica's by now: sending no lifecycle delivery until it is renewed, or found lost",
			"last_renewal_sent", ago.Round(time.Millisecond), "renew_deadline", t.length)
	}
	return fmt.Errorf("%w: its last renewal of the Lease was sent %v ago, the renew deadline is %v",
		errTenureLapsed, ago.Round(time.Millisecond), t.length)
}
