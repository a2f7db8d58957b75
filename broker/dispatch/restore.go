package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/presence"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// restorer brings back, when the Manager starts, the handlers a previous
// broker recorded in presence Leases.
type restorer struct{ *Manager }

// restore brings back the handlers a previous broker recorded, absent until
// an instance connects, so that their holds are still released after their
// grace even if they never come back. What a retry can fix (the API server
// not answering, the informers not started yet) is retried with backoff,
// and until then the broker is not ready; a Lease that cannot be read, or a
// binding that no longer compiles (a CRD removed, a version no longer
// served, admission off), is logged and left out, and the rest is restored.
// A Lease whose signature does not match, or, unsigned, whose recorded
// identity fails the rights check of a Hello, is not restored at all
// (reauthorize.go).
func (rs *restorer) restore(ctx context.Context) {
	if rs.opts.Presence == nil || rs.opts.Compile == nil {
		return
	}
	var pending map[string]bool // the handlers to try again; nil: all
	for delay := restoreBackoffMin; ; delay = min(2*delay, restoreBackoffMax) {
		records, err := rs.opts.Presence.List(ctx)
		if err != nil {
			rs.log.Warn("cannot read handler presence; retrying", "error", err, "delay", delay)
		} else {
			retry := map[string]bool{}
			for _, r := range records {
				if pending != nil && !pending[r.Handler] {
					continue
				}
				if err := rs.restoreOne(ctx, r); err != nil {
					rs.log.Warn("cannot restore handler yet; retrying", "handler", r.Handler, "error", err, "delay", delay)
					retry[r.Handler] = true
				}
			}
			if len(retry) == 0 {
				return
			}
			pending = retry
		}
		select {
		case <-ctx.Done():
			return
		case <-rs.opts.Clock.After(delay):
		}
	}
}

// restoreBackoffMin and restoreBackoffMax bound the wait between two tries
// to restore handlers.
const (
	restoreBackoffMin = 100 * time.Millisecond
	restoreBackoffMax = 10 * time.Second
)

// restoreOne brings back one recorded handler. It returns an error only for
// what a retry can fix.
func (rs *restorer) restoreOne(ctx context.Context, r presence.Record) error {
	if !r.Marks.Released.IsZero() {
		rs.log.Info("not restoring handler: it was released on request ('broker release --handler' deletes its lease)",
			"handler", r.Handler, "released", r.Marks.Released)
		return nil
	}
	if r.Unreadable != nil && r.Bindings == nil {
		rs.log.Error("cannot restore handler: its lease is unreadable; 'broker release --handler' still finds its holds",
			"handler", r.Handler, "error", r.Unreadable)
		return nil
	}
	if r.Unreadable != nil {
		rs.log.Error("part of the handler's lease is unreadable; restoring what could be read",
			"handler", r.Handler, "error", r.Unreadable)
		if r.Grace <= 0 {
			r.Grace = rs.opts.Absence.Grace
		}
	}
	var bindings []*binding.Binding
	sweep := r.Sweep
	for _, pb := range r.Bindings {
		b, err := rs.opts.Compile(ctx, []*tetherv1.Binding{pb})
		switch {
		case err == nil:
			bindings = append(bindings, b...)
		case transient(err):
			return fmt.Errorf("compiling binding %q: %w", pb.GetId(), err)
		default:
			rs.log.Error("binding no longer compiles; the handler is restored without it, and its holds there are swept",
				"handler", r.Handler, "binding", pb.GetId(), "error", err)
			if res := pb.GetResource(); mayHold(pb.GetKind()) && res.GetResource() != "" && res.GetVersion() != "" {
				gvr := schema.GroupVersionResource{Group: res.GetGroup(), Version: res.GetVersion(), Resource: res.GetResource()}
				sweep = append(sweep, presence.Scope{Resource: gvr, Namespaces: pb.GetNamespaces()})
			}
		}
	}
	rs.mu.Lock()
	_, attached := rs.controllers[r.Handler]
	rs.mu.Unlock()
	if attached {
		return nil // an instance connected meanwhile, its rights checked at Hello
	}
	if ok, err := rs.trusted(ctx, r, bindings); !ok {
		return err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.controllers[r.Handler]; ok {
		return nil // an instance connected meanwhile
	}
	rt := newController(rs.Manager, r.Handler, bindings, binding.Fingerprint(bindings), dropped(nil, sweep, bindings))
	rt.presence.declared = r.Bindings
	rt.presence.setLimits(r.Grace, r.AbsentReleaseAfter)
	absentSince := r.AbsentSinceOrLastSeen()
	if absentSince.IsZero() {
		absentSince = rs.opts.Clock.Now() // a Lease that says nothing: from now
	}
	rt.presence.absentSince = absentSince
	rt.presence.user = r.User
	if err := rt.start(rs.ctx); err != nil {
		if errors.Is(err, informer.ErrNotStarted) {
			return err
		}
		rs.log.Error("cannot restore handler", "handler", r.Handler, "error", err)
		return nil
	}
	rs.addControllerLocked(r.Handler, rt)
	rs.log.Info("restored handler from its lease", "handler", r.Handler, "absent_since", absentSince,
		"bindings", len(bindings), "recorded_bindings", len(r.Bindings))
	return nil
}

// mayHold reports whether bindings of kind k can have put holds on objects.
func mayHold(k tetherv1.BindingKind) bool {
	switch k {
	case tetherv1.BindingKind_BINDING_KIND_DELETE, tetherv1.BindingKind_BINDING_KIND_TIMER, tetherv1.BindingKind_BINDING_KIND_DAEMON:
		return true
	}
	return false
}
