package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

const (
	// refusals is how many attempts in a row the proxy refuses with
	// Unavailable, after ending a welcomed session (reconnect.backoff).
	refusals = 3
	// backoffCap is the longest delay between attempts the kit takes for
	// "a few seconds, well inside the handler's grace" (30 s).
	backoffCap = 5 * time.Second
)

// reconnectBackoff ends the session and refuses the next attempts with
// Unavailable, then lets one through and ends that one too: the delays
// between attempts must grow, stay under backoffCap, and start short
// again after the Welcome.
func (k *kit) reconnectBackoff(ctx context.Context) error {
	k.wire.mu.Lock()
	first := slices.Index(k.wire.streams, k.wire.liveStreamLocked()) // the session the kit ends
	k.wire.unavailable = refusals
	k.wire.mu.Unlock()
	if first < 0 || first != len(k.wire.streams)-1 {
		return errors.New("no session going on, last, to end")
	}
	k.wire.renew(0)
	if _, err := k.freshWelcome(ctx, first+1); err != nil {
		return err
	}
	k.wire.mu.Lock()
	welcomed := len(k.wire.streams) - 1
	k.wire.mu.Unlock()
	k.wire.renew(0)
	if _, err := k.freshWelcome(ctx, welcomed+1); err != nil {
		return err
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	ss := k.wire.streams
	if welcomed != first+refusals+1 {
		return fmt.Errorf("the handler opened %d streams while the kit refused %d: some ended otherwise", welcomed-first-1, refusals)
	}
	var gaps []time.Duration
	for i := first + 1; i <= welcomed; i++ {
		gaps = append(gaps, ss[i].started.Sub(ss[i-1].endedAt))
	}
	return backedOff(gaps, ss[welcomed+1].started.Sub(ss[welcomed].endedAt))
}

// freshWelcome waits for a stream from index from on that the broker
// welcomed and that goes on.
func (k *kit) freshWelcome(ctx context.Context, from int) (*stream, error) {
	var s *stream
	err := k.wire.awaitErr(ctx, "session welcomed after the kit ended the last one", func() bool {
		for _, x := range k.wire.streams[min(from, len(k.wire.streams)):] {
			if x.welcome != nil && !x.ended {
				s = x
				return true
			}
		}
		return false
	})
	return s, err
}

// backedOff judges the delays before each attempt: gaps after a welcomed
// session ended and after each refusal that followed, reset the delay
// after the next welcomed session ended.
func backedOff(gaps []time.Duration, reset time.Duration) error {
	last := gaps[len(gaps)-1]
	for i, g := range append(gaps, reset) {
		if g > backoffCap {
			return fmt.Errorf("attempt %d came %v after the end before it, more than %v (delays %v, then %v)", i+1, g.Round(time.Millisecond), backoffCap, round(gaps), reset.Round(time.Millisecond))
		}
	}
	switch {
	case last < 2*gaps[0]:
		return fmt.Errorf("the delays between attempts do not grow: %v", round(gaps))
	case reset >= last:
		return fmt.Errorf("after a Welcome the delay is %v, not reset below the last one before it (delays %v)", reset.Round(time.Millisecond), round(gaps))
	}
	return nil
}

func round(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
