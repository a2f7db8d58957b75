package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/presence"
)

// errAbsent ends a wait for an instance once the handler is past its grace.
var errAbsent = errors.New("handler is absent")

// absence says where a handler stands: present (an instance connected), in
// its grace, absent past grace (rule 3c: deleting objects are released), or
// absent past absent_release_after (rule 3d: every hold is stripped).
type absence struct {
	absent, long bool
}

func (rt *runtime) setLimits(grace, absentAfter time.Duration) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.grace, rt.absentAfter = grace, absentAfter
	rt.pokePresence()
}

// absenceLocked computes the handler's absence at now; rt.mu must be held.
func (rt *runtime) absenceLocked(now time.Time) absence {
	if len(rt.instances) > 0 || rt.absentSince.IsZero() {
		return absence{}
	}
	gone := now.Sub(rt.absentSince)
	return absence{
		absent: gone >= rt.grace,
		long:   rt.absentAfter > 0 && gone >= rt.absentAfter,
	}
}

func (rt *runtime) absence() absence {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.absenceLocked(time.Now())
}

func (rt *runtime) pokePresence() {
	select {
	case rt.presenceWake <- struct{}{}:
	default:
	}
}

// presenceLoop keeps the handler's Lease current and acts on the moments
// its grace and absent_release_after run out: every object is looked at
// again, and workers waiting for an instance are woken to release.
func (rt *runtime) presenceLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	var last absence
	var written presence.Record
	var renewed time.Time
	hooks := webhookSync{rt: rt}
	for {
		now := time.Now()
		rt.mu.Lock()
		state := rt.absenceLocked(now)
		rec := presence.Record{
			Handler: rt.name, Instances: len(rt.instances), AbsentSince: rt.absentSince,
			Grace: rt.grace, AbsentReleaseAfter: rt.absentAfter, Bindings: rt.declared,
			Resources: rt.resources(), Holder: rt.m.opts.Identity, LastSeen: written.LastSeen,
		}
		renewEvery := min(max(rt.grace/3, time.Second), 10*time.Second)
		next := renewEvery
		if !rt.absentSince.IsZero() {
			for _, limit := range []time.Duration{rt.grace, rt.absentAfter} {
				if at := rt.absentSince.Add(limit); limit > 0 && at.After(now) {
					next = min(next, at.Sub(now))
				}
			}
		}
		rt.mu.Unlock()

		if state != last {
			rt.log.Info("handler presence changed", "absent", state.absent, "long_absent", state.long)
			last = state
			rt.signalAll()
		}
		switch {
		case rec.Instances > 0 && now.Sub(renewed) >= renewEvery:
			rec.LastSeen, renewed = now, now
		case rec.LastSeen.IsZero():
			// A handler restored from its Lease was last seen when it left.
			rec.LastSeen = rec.AbsentSince
		}
		if changedRecord(written, rec) {
			rt.writePresence(ctx, rec)
			written = rec
		}
		rt.observePresence(rec.Instances)
		if !hooks.sync(ctx, state.absent) {
			next = min(next, webhookRetry)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-rt.presenceWake:
		case <-t.C:
		}
	}
}

func changedRecord(a, b presence.Record) bool {
	return a.Instances != b.Instances || !a.AbsentSince.Equal(b.AbsentSince) || !a.LastSeen.Equal(b.LastSeen) ||
		a.Grace != b.Grace || a.AbsentReleaseAfter != b.AbsentReleaseAfter || len(a.Bindings) != len(b.Bindings)
}

func (rt *runtime) writePresence(ctx context.Context, rec presence.Record) {
	if rt.m.opts.Presence == nil {
		return
	}
	if err := rt.m.opts.Presence.Put(ctx, rec); err != nil && ctx.Err() == nil {
		rt.log.Warn("cannot record handler presence", "error", err)
	}
}

// resources lists the resources of the bindings; rt.mu need not be held.
func (rt *runtime) resources() []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, 0, len(rt.byResource))
	for gvr := range rt.byResource {
		out = append(out, gvr)
	}
	return out
}

// signalAll wakes workers waiting for an instance and has every object
// looked at again.
func (rt *runtime) signalAll() {
	rt.mu.Lock()
	rt.signalLocked()
	uids := make([]types.UID, 0, len(rt.objects))
	for uid := range rt.objects {
		uids = append(uids, uid)
	}
	rt.mu.Unlock()
	for _, uid := range uids {
		rt.queue.Add(uid)
	}
}

// strict reports whether a STRICT binding holds obj: such holds are kept
// through absence, for cleanup that must not be skipped.
func (rt *runtime) strict(bindings []*binding.Binding, obj *unstructured.Unstructured) bool {
	for _, b := range bindings {
		if b.Policy == binding.PolicyStrict && b.Holds() && rt.matches(b, obj, nil) {
			return true
		}
	}
	return false
}

// processAbsent handles an object while the handler is absent past grace:
// an object being deleted is released (rule 3c); once absent past
// absent_release_after, a live object's hold is stripped too (rule 3d),
// paced by the release limiter, to be added again on return. Nothing is
// delivered.
func (rt *runtime) processAbsent(ctx context.Context, o *object, obj *unstructured.Unstructured, state absence) error {
	bindings := rt.byResource[o.res.GroupVersionResource]
	if !hold.Has(obj, rt.name) || rt.strict(bindings, obj) {
		return nil
	}
	rt.mu.Lock()
	grace, absentAfter := rt.grace, rt.absentAfter
	rt.mu.Unlock()
	var msg string
	switch {
	case obj.GetDeletionTimestamp() != nil:
		msg = fmt.Sprintf("handler %q has had no instance connected for longer than its grace of %v: released (rule 3c)", rt.name, grace)
	case state.long:
		// Waiting for the turn frees the worker (see WriteLimiter): releases
		// of objects being deleted must not queue behind these.
		if wait := rt.releaseTurn(o); wait > 0 {
			return &pacedWrite{wait: wait}
		}
		msg = fmt.Sprintf("handler %q has been absent for longer than %v: hold stripped until it returns (rule 3d)", rt.name, absentAfter)
	default:
		return nil
	}
	return rt.apply(ctx, o, obj, &write{removeHold: true, release: absentRelease(obj), landed: &note{reason: "HoldReleased", message: msg}})
}

// webhookRetry is how soon a failed write of a handler's webhook
// configurations is tried again.
const webhookRetry = 2 * time.Second

// webhookSync writes a handler's webhook configurations when its presence
// calls for another state than the one written: at start (which also
// removes those of admission bindings the handler no longer has) and when
// it passes its grace or returns.
type webhookSync struct {
	rt      *runtime
	done    bool
	written bool // the absent state written
}

// sync reports false when the write failed and should be tried again.
func (w *webhookSync) sync(ctx context.Context, absent bool) bool {
	hooks := w.rt.m.opts.Webhooks
	if hooks == nil || (w.done && w.written == absent) {
		return true
	}
	if err := hooks.Sync(ctx, w.rt.name, w.rt.bindings, absent); err != nil {
		if ctx.Err() == nil {
			w.rt.log.Warn("cannot write the handler's webhook configurations; retrying", "absent", absent, "error", err)
		}
		return false
	}
	w.done, w.written = true, absent
	return true
}
