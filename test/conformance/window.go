package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const (
	// handlerWindow is the window the proxy gives the handler in the
	// Welcome, smaller than the broker's (its default, 16).
	handlerWindow = 1
	// crossing is how long an ack may take from the handler to the proxy:
	// a delivery the proxy forwarded less than this before an ack reached
	// it may have crossed that ack, and met a window with a free slot.
	crossing = 50 * time.Millisecond
)

// slowWidgets are created at once with scenario slow, whose create takes a
// second in the handler's spec, so that the broker, whose window is larger
// than the handler's, sends the second while the first runs.
var slowWidgets = []string{"slow-1", "slow-2"}

// windowBound starts a fresh session on which the handler's Welcome says a
// window of one, while the broker keeps its own, and creates two slow
// widgets at once: the handler must hold one delivery at a time, handing
// back (RETRY) the one past its window. Each widget's create must in the
// end be acked OK, and every delivery acked.
func (k *kit) windowBound(ctx context.Context) error {
	s, err := k.freshSession(ctx, handlerWindow)
	if err != nil {
		return err
	}
	k.windowed = s
	for _, name := range slowWidgets {
		if err := k.createWidget(ctx, name, "slow"); err != nil {
			return err
		}
	}
	if !k.wire.await(ctx, waitFor, func() bool { return slowDone(s) }) {
		return fmt.Errorf("widgets %v not both created with an OK ack and every delivery acked within %v", slowWidgets, waitFor)
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	return heldAtOnce(slowDeliveries(s), handlerWindow)
}

// windowOver judges the deliveries of windowBound that came while the
// handler's window was full: each acked, RETRY.
func (k *kit) windowOver(ctx context.Context) error {
	if k.windowed == nil {
		return errors.New("no session with a smaller window: window.bound did not get that far")
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	if !slowDone(k.windowed) {
		return fmt.Errorf("widgets %v not both created with an OK ack and every delivery acked", slowWidgets)
	}
	return handedBack(slowDeliveries(k.windowed), handlerWindow)
}

// heldAtOnce fails when the handler held more than window of ds at once,
// or when the broker never sent one past the window (nothing to judge).
func heldAtOnce(ds []exchange, window int) error {
	if !slices.ContainsFunc(ds, func(d exchange) bool { return heldAt(ds, d.sent) >= window }) {
		return errNoneOver
	}
	for _, d := range ds {
		if n := heldAt(ds, d.sent) + 1; d.held() && n > window {
			return fmt.Errorf("with a window of %d, the handler held %d deliveries at once: %s (attempt %d) was acked %v while another was in flight",
				window, n, d.d.GetRef().GetName(), d.d.GetAttempt(), d.a.GetOutcome())
		}
	}
	return nil
}

// handedBack fails unless each of ds that came while the handler held
// window of them was acked RETRY.
func handedBack(ds []exchange, window int) error {
	over := 0
	for _, d := range ds {
		if heldAt(ds, d.sent) < window {
			continue
		}
		over++
		if d.a.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY {
			return fmt.Errorf("%s (attempt %d) came while the window of %d was full and was acked %v (%q), want RETRY",
				d.d.GetRef().GetName(), d.d.GetAttempt(), window, d.a.GetOutcome(), d.a.GetMessage())
		}
	}
	if over == 0 {
		return errNoneOver
	}
	return nil
}

var errNoneOver = errors.New("the broker never sent a delivery while the handler's window was full: nothing to judge")

// freshSession ends the handler's session and waits for the next one,
// welcomed with window for the handler.
func (k *kit) freshSession(ctx context.Context, window uint32) (*stream, error) {
	k.wire.mu.Lock()
	before := len(k.wire.streams)
	k.wire.mu.Unlock()
	k.wire.renew(window)
	var s *stream
	if !k.wire.await(ctx, waitFor, func() bool {
		for _, x := range k.wire.streams[before:] {
			if x.welcome != nil && x.window == window && !x.ended {
				s = x
				return true
			}
		}
		return false
	}) {
		return nil, fmt.Errorf("no fresh session welcomed with a window of %d within %v of ending the last one", window, waitFor)
	}
	return s, nil
}

// exchange is one delivery of the stream with its ack (nil while none).
type exchange struct {
	d     *tetherv1.Delivery
	sent  time.Time
	a     *tetherv1.Ack
	acked time.Time
}

// held says whether the handler kept the delivery: it answered it other
// than RETRY, or has not answered it yet.
func (e exchange) held() bool {
	return e.a == nil || e.a.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY
}

// heldAt counts the deliveries the handler held when one reached it at t
// (sent before t, not yet answered crossing after t).
func heldAt(ds []exchange, t time.Time) int {
	n := 0
	for _, h := range ds {
		if h.held() && h.sent.Before(t) && (h.a == nil || h.acked.After(t.Add(crossing))) {
			n++
		}
	}
	return n
}

// slowDeliveries are the creates of the slow widgets on s; the wire's lock
// must be held.
func slowDeliveries(s *stream) []exchange {
	var ds []exchange
	for _, d := range s.deliveries {
		if d.d.GetKind() == tetherv1.DeliveryKind_DELIVERY_KIND_CREATE && slices.Contains(slowWidgets, d.d.GetRef().GetName()) {
			a := s.acks[d.d.GetId()]
			ds = append(ds, exchange{d: d.d, sent: d.at, a: a.a, acked: a.at})
		}
	}
	return ds
}

// slowDone says whether each slow widget's create was acked OK on s and
// every delivery of them acked; the wire's lock must be held.
func slowDone(s *stream) bool {
	ds := slowDeliveries(s)
	for _, name := range slowWidgets {
		if !slices.ContainsFunc(ds, func(d exchange) bool {
			return d.d.GetRef().GetName() == name && d.a.GetOutcome() == tetherv1.Outcome_OUTCOME_OK
		}) {
			return false
		}
	}
	return !slices.ContainsFunc(ds, func(d exchange) bool { return d.a == nil })
}
