package dispatch

import (
	"context"
	"hash/fnv"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/timer"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// timers delivers one handler's ticks.
type timers struct {
	*handler
	deliver delivery
}

// process keeps one schedule per matching timer binding and delivers
// the ticks that came due. A tick is delivered by the object's worker, so at
// most one is outstanding per (binding, object): a slow handler gets its
// ticks late, never piled up. A tick writes nothing unless its ack carries
// a patch or a result.
//
// The objects of an initial list (a broker start, the handler's return) all
// come at once: their first ticks, and the ticks that came due while the
// handler was away, are spread over one interval by a fixed offset per
// object, so that ten thousand objects do not tick in the same millisecond
// and then stay in step.
func (tm *timers) process(ctx context.Context, o *object) result {
	listed := o.listed
	o.listed = false
	for _, b := range tm.bindingsOf(o) {
		if b.Kind != binding.Timer {
			continue
		}
		key := timer.Key{UID: o.uid, Name: b.ID}
		if !tm.matchesCur(b, o) {
			if o.timers.has(b.ID) {
				tm.stop(o, b.ID)
			}
			continue
		}
		if !o.timers.has(b.ID) {
			o.timers.add(b.ID)
			first := tm.clock.Now().Add(b.Timer.InitialDelay)
			if listed {
				first = first.Add(spread(o.uid, b.Timer.Interval))
			}
			tm.sched.Schedule(key, first)
			continue
		}
		due, ok := tm.takeDue(o, b.ID)
		if !ok {
			if _, scheduled := tm.sched.Scheduled(key); !scheduled {
				// Its tick came while the handler was absent.
				tm.sched.Schedule(key, returnTick(b.Timer, o, due, listed, tm.clock.Now()))
			}
			continue
		}
		if listed {
			// The tick came due while the handler was away; every object
			// of the handler has one now.
			tm.sched.Schedule(key, returnTick(b.Timer, o, due, listed, tm.clock.Now()))
			continue
		}
		if b.Timer.Idle > 0 {
			tm.mu.Lock()
			quiet := o.changed.Add(b.Timer.Idle)
			tm.mu.Unlock()
			if tm.clock.Now().Before(quiet) {
				tm.sched.Schedule(key, quiet)
				continue
			}
		}
		d := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_TICK, Object: o.json(), Scheduled: timestamppb.New(due)}
		sent := tm.clock.Now()
		rep := tm.deliver.call(ctx, o, b, d)
		if rep.stops() {
			tm.markDue(o, b.ID, due) // the same tick, again
			return rep.result
		}
		tm.sched.Schedule(key, nextTick(b.Timer, o.uid, due, sent, tm.clock.Now()))
		if rep.ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
			continue
		}
		var acc accumulated
		if err := acc.add(b, rep.ack, rep.in.User); err != nil {
			tm.invalidPatch(o.decoded(), b, err)
			continue
		}
		if acc.empty() {
			continue // the common tick: an ack with nothing to write
		}
		if w := acc.write(tm.name); !w.empty() {
			if wait, err := tm.writes.apply(ctx, o, w); wait > 0 || err != nil {
				return result{after: wait, err: err}
			}
		}
	}
	return goOn
}

// nextTick is when the tick after one due at due, sent at sent and
// acknowledged now, comes: the next point of the grid for sharp timers; for
// the others at least one interval after the ack.
//
// A tick the broker sent late (sent after due, at most one interval counted)
// has its successor put off by the object's own offset within that lateness.
// Ticks that a stall held back go out together when it ends; due one
// interval after their acks, they would stay in step from then on, and each
// lap of the clump would be late again and draw in the ticks due around it.
// The offsets spread them back over about the stall's length. A tick sent on
// time keeps interval after the ack.
func nextTick(t binding.TimerOptions, uid types.UID, due, sent, now time.Time) time.Time {
	if t.Sharp {
		return nextOnGrid(t.Interval, due, now)
	}
	late := min(max(sent.Sub(due), 0), t.Interval)
	return now.Add(t.Interval + spread(uid, late))
}

// nextOnGrid is the first point of a sharp timer's grid after the one at
// due that has not passed by now: points that passed while the handler was
// slow are skipped, so ticks never pile up.
func nextOnGrid(interval time.Duration, due, now time.Time) time.Time {
	next := due.Add(interval)
	if next.Before(now) {
		missed := now.Sub(next)/interval + 1
		next = next.Add(missed * interval)
	}
	return next
}

// spread is an offset in [0, interval) for an object, from its UID: fixed for
// one interval, and spread evenly over the objects.
func spread(uid types.UID, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(uid))
	return time.Duration(mix64(h.Sum64()) % uint64(interval))
}

// returnTick is when a tick that came due while the handler was away is
// delivered: at once, or, when the object is part of the handler's return
// (listed), at its own offset within the next interval for a timer that
// ticks after each ack, or at the next point of its grid for a sharp timer
// (whose grid was spread when it started). due is zero when unknown.
func returnTick(t binding.TimerOptions, o *object, due time.Time, listed bool, now time.Time) time.Time {
	switch {
	case !listed:
		return now
	case t.Sharp && !due.IsZero():
		return nextOnGrid(t.Interval, due, now)
	default:
		return now.Add(spread(o.uid, t.Interval))
	}
}

func (tm *timers) stop(o *object, id string) {
	tm.sched.Cancel(timer.Key{UID: o.uid, Name: id})
	o.timers.remove(id)
	tm.takeDue(o, id)
}

// stopAll ends every timer of an object: it is being deleted or gone.
func (tm *timers) stopAll(o *object) {
	for _, id := range slices.Clone(o.timers) {
		tm.stop(o, id)
	}
}
