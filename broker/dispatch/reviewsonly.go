package dispatch

import (
	"fmt"
	"slices"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// reviewsOnly is a handler as a replica that does not lead knows it: the
// admission bindings and the instances that signed in for reviews only
// (CAPABILITY_EVERY_REPLICA). It writes nothing, holds nothing and keeps
// no Lease or webhook: the API server may call any ready replica, and
// this one answers from these instances. It is the reviews and pool code
// of a controller without the rest.
type reviewsOnly struct {
	fingerprint string
	reviews     *reviews
	// ended closes when this replica comes to lead: the sessions end with
	// Unavailable, and their instances reconnect for full ones.
	ended chan struct{}
	// superseded closes once the handler has a controller here: reviews
	// waiting for an instance look for the handler again.
	superseded chan struct{}
}

func newReviewsOnly(m *Manager, name string, bindings []*binding.Binding, fp string) *reviewsOnly {
	h := newHandler(&m.opts, m.log.Named("handler").With("handler", name, "reviews_only", true), name, bindings)
	return &reviewsOnly{
		fingerprint: fp,
		reviews:     &reviews{handler: h, deliver: &deliverer{handler: h, send: (*session.Instance).DeliverUnless}},
		ended:       make(chan struct{}), superseded: make(chan struct{}),
	}
}

func (ro *reviewsOnly) isEnded() bool {
	select {
	case <-ro.ended:
		return true
	default:
		return false
	}
}

// everyReplica tells whether the instance keeps a session to every broker
// replica and has reviews to answer, so that one that does not lead may
// take it for reviews.
func everyReplica(in *session.Instance, bindings []*binding.Binding) bool {
	return in.Capabilities.Has(tetherv1.Capability_CAPABILITY_EVERY_REPLICA) &&
		slices.ContainsFunc(bindings, func(b *binding.Binding) bool { return b.Kind.IsAdmission() })
}

// followerReviews are the handlers a replica that does not lead knows for
// their reviews, by name; the Manager's mu guards them.
type followerReviews map[string]*reviewsOnly

// attach registers, on a replica that does not lead, an instance for the
// handler's admission reviews, making the handler with newRO when it is
// not known. As on the leader, every instance of a handler must declare the
// same bindings.
func (f followerReviews) attach(in *session.Instance, bindings []*binding.Binding,
	newRO func(name string, bindings []*binding.Binding, fp string) *reviewsOnly) (session.Attachment, error) {
	fp := binding.Fingerprint(bindings)
	ro := f[in.Handler]
	if ro != nil && ro.isEnded() {
		ro = nil // known from before this replica led, and not since
	}
	if ro != nil && ro.fingerprint != fp {
		if n := ro.reviews.pool.len(); n > 0 {
			return session.Attachment{}, fmt.Errorf("%w: its bindings differ from those of the %d connected instance(s); "+
				"it is accepted once they have left, as in a rollout to new bindings", session.ErrTryLater, n)
		}
		ro = nil
	}
	if ro == nil {
		ro = newRO(in.Handler, bindings, fp)
		f[in.Handler] = ro
	}
	ro.reviews.pool.add(in)
	return session.Attachment{
		Detach:      func() { ro.reviews.pool.remove(in) },
		ReviewsOnly: true,
		Ended:       ro.ended,
	}, nil
}

// knowReviews makes a replica that does not lead know a handler's admission
// bindings from its Lease before any instance of it connects here: a review
// the API server sends to a new replica (the webhooks point at every ready
// one) then waits, within its deadline, for the instance that keeps a
// session to every replica to find this one, instead of failing at once.
func (m *Manager) knowReviews(handler string, bindings []*binding.Binding) {
	if !slices.ContainsFunc(bindings, func(b *binding.Binding) bool { return b.Kind.IsAdmission() }) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx != nil || m.follower[handler] != nil {
		return // leading, or known from an instance
	}
	m.follower[handler] = newReviewsOnly(m, handler, bindings, binding.Fingerprint(bindings))
}

// end ends the reviews-only sessions, as this replica comes to lead. The
// handlers stay known by their bindings until each has a controller, so
// that a review meanwhile waits for an instance instead of finding no
// handler.
func (f followerReviews) end() {
	for _, ro := range f {
		if !ro.isEnded() {
			close(ro.ended)
		}
	}
}

// supersede records that handler has a controller now: it answers the
// handler's reviews, and those waiting on the reviews-only instances move
// to it.
func (f followerReviews) supersede(handler string) {
	if ro := f[handler]; ro != nil {
		delete(f, handler)
		close(ro.superseded)
	}
}

// addControllerLocked makes rt the handler's controller, superseding its
// reviews-only instances; m.mu is held.
func (m *Manager) addControllerLocked(handler string, rt *controller) {
	m.controllers[handler] = rt
	m.follower.supersede(handler)
}

// Connected reports whether an instance of the handler has a session to
// this replica, leading or not: a replica that starts waits for one of each
// handler that answers on every replica before it reports ready.
func (m *Manager) Connected(handler string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rt := m.controllers[handler]; rt != nil && rt.reviews.pool.len() > 0 {
		return true
	}
	ro := m.follower[handler]
	return ro != nil && !ro.isEnded() && ro.reviews.pool.len() > 0
}
