package presence

import (
	"fmt"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Identity is what the leader learned, at its last look, of whether a
// handler's identity can still sign in.
type Identity int

const (
	// IdentityUnknown: not looked at, or the look failed.
	IdentityUnknown Identity = iota
	// IdentityValid: the identity may still sign in as the handler.
	IdentityValid
	// IdentityGone: its ServiceAccount is deleted.
	IdentityGone
	// IdentityRevoked: a SubjectAccessReview denies it the handler's name.
	IdentityRevoked
)

// Absent reports whether the record's handler has no instance and is past
// its grace at now.
func (r Record) Absent(now time.Time) bool {
	return r.Instances == 0 && now.Sub(r.AbsentSinceOrLastSeen()) >= r.Grace
}

// Strict reports whether the handler has a STRICT binding: holds nothing
// releases but its ack, or a webhook that fails closed while it is absent.
func (r Record) Strict() bool {
	for _, b := range r.Bindings {
		if b.GetFinalizer() == tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT {
			return true
		}
	}
	return false
}

// NeedsIdentityCheck reports whether the leader should look at the
// handler's identity at now. Only an absent handler with STRICT bindings
// can be orphaned: the holds and webhooks of the others end with its grace
// or its absent_release_after, and a present one signed in lately.
// Released handlers are forgotten, and an identity never recorded
// (insecure mode) cannot be looked at.
func NeedsIdentityCheck(r Record, now time.Time) bool {
	return r.Marks.Released.IsZero() && r.User.Name != "" && r.Absent(now) && r.Strict()
}

// Orphan says why the handler is orphaned, given what the leader learned of
// its identity, or "" when it is not (or nothing is known). An orphan's
// STRICT holds and webhooks stay until `broker release --handler` or its
// identity's return.
func Orphan(r Record, now time.Time, id Identity) string {
	if !NeedsIdentityCheck(r, now) {
		return ""
	}
	what := "user " + r.User.Name
	if ns, name, ok := r.User.ServiceAccount(); ok {
		what = fmt.Sprintf("ServiceAccount %s/%s", ns, name)
	}
	switch id {
	case IdentityGone:
		return fmt.Sprintf("%s is deleted: the handler cannot sign in again, and its STRICT holds and webhooks stay until `broker release --handler %s`", what, r.Handler)
	case IdentityRevoked:
		return fmt.Sprintf("%s may no longer sign in as handler %s: its STRICT holds and webhooks stay until its rights are restored or `broker release --handler %s`", what, r.Handler, r.Handler)
	}
	return ""
}
