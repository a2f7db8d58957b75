package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/timer"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// daemon is one daemon binding's daemon on one object.
type daemon struct {
	// inst runs it; nil when it is not running.
	inst *session.Instance
	// exited: it returned by itself and waits for a restart (if any).
	exited bool
	// restarts counts restarts, for the backoff between them.
	restarts int
	// failures counts the runs in a row that failed: the next start is
	// that many attempts on (the daemon's retry).
	failures int
}

// next is d's next state, running on in (nil: waiting for a restart), with
// the counts of its restarts and failures.
func (d *daemon) next(in *session.Instance) *daemon {
	n := &daemon{inst: in, exited: in == nil}
	if d != nil {
		n.restarts, n.failures = d.restarts, d.failures
	}
	return n
}

// daemonExit is one DaemonExited repods.
type daemonExit struct {
	inst *session.Instance
	msg  *tetherv1.DaemonExited
}

func restartKey(id string) string { return "restart/" + id }

// running reports whether d runs on an instance still connected.
func (d *daemon) running() bool {
	if d == nil || d.inst == nil {
		return false
	}
	select {
	case <-d.inst.Done():
		return false
	default:
		return true
	}
}

// daemons runs one handler's daemons on the owners of their objects.
type daemons struct {
	*handler
	deliver *deliverer
}

// process starts a daemon per matching daemon binding on the object's
// owner, takes exit reports, restarts where the binding asks, and stops
// daemons whose object no longer matches. It looks again later when the
// write an exit report asked for waits for its turn.
func (ds *daemons) process(ctx context.Context, o *object) result {
	if wait, err := ds.takeExits(ctx, o); err != nil {
		return failedWith(err)
	} else if wait > 0 {
		return lookAgainIn(wait)
	}
	for _, b := range ds.bindingsOf(o) {
		if b.Kind != binding.Daemon {
			continue
		}
		ds.mu.Lock()
		d := o.daemons[b.ID]
		ds.mu.Unlock()
		if !ds.matchesCur(b, o) {
			if err := ds.stop(ctx, o, b, "the object no longer matches"); err != nil {
				return failedWith(err)
			}
			continue
		}
		if d.running() {
			owner, _ := ds.pool.owner(o.uid)
			if owner == nil || owner == d.inst || d.inst.Leaving() {
				// A leaving instance stops its daemons as it drains: the
				// daemon starts on the next owner once that session ended
				// (removeInstance looks at the object again), never beside it.
				continue
			}
			// The object moved to another instance: stop the daemon where it
			// runs, then start it on the new owner.
			if err := ds.stop(ctx, o, b, "the object moved to another instance"); err != nil {
				return failedWith(err)
			}
			d = nil
		}
		if d != nil && d.exited {
			if _, due := ds.takeDue(o, restartKey(b.ID)); !due {
				continue
			}
		}
		d0 := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, Object: o.json()}
		if d != nil {
			d0.Attempt = uint32(d.failures) // the failed runs are attempts before this start's
		}
		rep := ds.deliver.call(ctx, o, b, d0)
		if rep.aborts() {
			return rep.result
		}
		if rep.after > 0 {
			ds.sched.Schedule(timer.Key{UID: o.uid, Name: restartKey(b.ID)}, ds.clock.Now().Add(rep.after))
			ds.set(o, b.ID, d.next(nil))
			continue
		}
		if rep.ack.GetOutcome() == tetherv1.Outcome_OUTCOME_OK {
			ds.set(o, b.ID, d.next(rep.in))
		}
	}
	return goOn
}

func (ds *daemons) set(o *object, id string, d *daemon) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d == nil {
		delete(o.daemons, id)
		return
	}
	if o.daemons == nil {
		o.daemons = map[string]*daemon{}
	}
	o.daemons[id] = d
}

// wantsExit reports whether a DaemonExited from in for bindingID is worth
// keeping until the object is processed: bindingID is one of bindings'
// daemons and in has not reported it yet. Others are dropped as they
// arrive, so that a flood of reports takes no memory. Whether in still
// runs that daemon is for takeExits to judge: the report may come before
// the start it follows is recorded. o's lock (handler.mu) must be held.
func (o *object) wantsExit(bindings []*binding.Binding, in *session.Instance, bindingID string) bool {
	if !slices.ContainsFunc(bindings, func(b *binding.Binding) bool { return b.ID == bindingID && b.Kind == binding.Daemon }) {
		return false
	}
	return !slices.ContainsFunc(o.exits, func(x daemonExit) bool {
		return x.inst == in && x.msg.GetBindingId() == bindingID
	})
}

// takeExits applies the exit reports: the daemon is no longer running, a
// failure becomes a Warning Event, a restart is scheduled where the
// binding asks for one: after the delay the failure asked for (a
// TemporaryError's), or else with backoff; and what the run asked to write
// on the object is written, as the instance that ran it.
func (ds *daemons) takeExits(ctx context.Context, o *object) (time.Duration, error) {
	ds.mu.Lock()
	exits := o.exits
	o.exits = nil
	ds.mu.Unlock()
	var acc accumulated
	for _, x := range exits {
		b := ds.bindingByID(o, x.msg.GetBindingId())
		ds.mu.Lock()
		d := o.daemons[x.msg.GetBindingId()]
		ds.mu.Unlock()
		if b == nil || d == nil || d.inst != x.inst {
			continue // a report about a daemon already stopped or moved
		}
		what := fmt.Sprintf("daemon %q of handler %q", b.ID, ds.name)
		if x.msg.GetFailed() {
			ds.opts.Recorder.Event(o.decoded(), true, "DaemonFailed", fmt.Sprintf("%s returned an error: %s", what, x.msg.GetMessage()))
		} else {
			traceLog(ctx, ds.log).Info("daemon returned", "binding", b.ID, "namespace", o.cur.Namespace, "name", o.cur.Name)
		}
		if err := acc.add(b, exitWrite(x.msg), x.inst.User); err != nil {
			ds.invalidPatch(o.decoded(), b, err)
		}
		next := d.next(nil)
		next.restarts++
		next.failures = 0
		wait := b.Retry.Delay(next.restarts)
		if x.msg.GetFailed() {
			next.failures = d.failures + 1
			if ra := x.msg.GetRetryAfter().AsDuration(); ra > 0 {
				wait = ra
			}
		}
		ds.set(o, b.ID, next)
		if b.Daemon.Restart {
			ds.sched.Schedule(timer.Key{UID: o.uid, Name: restartKey(b.ID)}, ds.clock.Now().Add(wait))
		}
	}
	if acc.empty() {
		return 0, nil
	}
	return ds.writes.apply(ctx, o, acc.write(ds.name))
}

// exitWrite is what a daemon's exit report asks to write, in the form of
// the ack whose checks it passes.
func exitWrite(m *tetherv1.DaemonExited) *tetherv1.Ack {
	return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK, Patch: m.GetPatch(), StatusPatch: m.GetStatusPatch(), Result: m.GetResult()}
}

// stop asks the instance running b's daemon to stop it and waits for
// the acknowledgement, at most the binding's cancellation timeout; past it
// the daemon counts as stopped, with a Warning Event.
func (ds *daemons) stop(ctx context.Context, o *object, b *binding.Binding, why string) error {
	ds.mu.Lock()
	d := o.daemons[b.ID]
	ds.mu.Unlock()
	ds.sched.Cancel(timer.Key{UID: o.uid, Name: restartKey(b.ID)})
	if !d.running() {
		ds.set(o, b.ID, nil)
		return nil
	}
	timeout := b.Daemon.CancellationTimeout
	stop := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP, Object: o.json()}
	_, err := ds.deliver.deliverTo(ctx, d.inst, o, b, stop, timeout, nil)
	switch {
	case err == nil, errors.Is(err, session.ErrGone), errors.Is(err, session.ErrLeaving):
		// Acknowledged, or its session ended or is ending, which stops its
		// daemons.
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, session.ErrFenced):
		// Not sent: this replica may no longer lead, and the daemon may be
		// another's to stop by now.
		return fmt.Errorf("stopping daemon %q: %w", b.ID, err)
	default:
		ds.opts.Recorder.Event(o.decoded(), true, "DaemonStopTimeout", fmt.Sprintf(
			"daemon %q of handler %q did not acknowledge stop (%s) within %v; counting it as stopped", b.ID, ds.name, why, timeout))
		daemonStopTimedOut(o)
	}
	ds.set(o, b.ID, nil)
	return nil
}

// stopAll stops every daemon of an object.
func (ds *daemons) stopAll(ctx context.Context, o *object, why string) error {
	for _, b := range ds.bindingsOf(o) {
		if b.Kind != binding.Daemon {
			continue
		}
		if err := ds.stop(ctx, o, b, why); err != nil {
			return err
		}
	}
	return nil
}
