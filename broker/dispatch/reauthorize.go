package dispatch

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/presence"
)

// A handler's presence Lease is written by the broker, but anyone who may
// write Leases in the broker's namespace can write one too. Restoring a
// handler from it writes its webhook configurations, sweeps its holds from
// the scopes it records and releases its holds after its grace, so a
// record is restored as written only when the broker's signature on it
// verifies (presence.Key.Trust). One whose signature does not match is
// not restored. An unsigned one (a broker that did not sign wrote it: an
// upgrade) has the identity it records held to the rights a Hello needs
// for the bindings it records (Options.Reauthorize), and is not restored
// when that fails, rather than without the binding that failed: left out,
// that binding's scope would be swept of the handler's holds at once,
// STRICT ones included, on the say of a record nobody vouched for. Not
// restored, nothing of the record is acted on: the handler's holds stay as
// they are, and no webhook is written for it, until an instance signs in
// as it (its rights checked as every Hello's are) or `broker release
// --handler` releases it.

// reasonNotRestored is the Event reason of a record that is not restored.
const reasonNotRestored = "HandlerNotRestored"

// trusted reports whether r may be restored with bindings: its signature
// verifies, or, unsigned, no check is configured (insecure mode) or the
// recorded identity passes it. A record that may not is logged, posted as
// a Warning Event on the Lease and marked on it for `broker status`;
// errors (the API server not answering) are returned, for the restore to
// retry.
func (rs *restorer) trusted(ctx context.Context, r presence.Record, bindings []*binding.Binding) (bool, error) {
	trust, why := rs.opts.Presence.Key.Trust(r, rs.opts.Clock.Now())
	switch trust {
	case presence.TrustNone:
		rs.notRestored(ctx, r, why)
		return false, nil
	case presence.TrustRecheck:
		if ok, err := rs.reauthorized(ctx, r, bindings); !ok {
			return false, err
		}
	}
	if r.Marks.NotRestored != "" {
		if err := rs.opts.Presence.MarkNotRestored(ctx, r.Handler, ""); err != nil {
			rs.log.Warn("cannot clear the not-restored mark of the handler's lease", "handler", r.Handler, "error", err)
		}
	}
	return true, nil
}

// reauthorized reports whether the identity r records passes the rights
// check of a Hello for bindings; true when no check is configured.
func (rs *restorer) reauthorized(ctx context.Context, r presence.Record, bindings []*binding.Binding) (bool, error) {
	if rs.opts.Reauthorize == nil {
		return true, nil
	}
	err := rs.opts.Reauthorize(ctx, r.Handler, r.User, bindings)
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, auth.ErrDenied):
		return false, fmt.Errorf("re-checking the rights of the identity the lease records: %w", err)
	}
	rs.notRestored(ctx, r, fmt.Sprintf("the identity its lease records (%q) fails the rights check of a Hello: %v", r.User.Name, err))
	return false, nil
}

// notRestored says, in the log, an Event on the Lease and a mark on it,
// why r is not restored.
func (rs *restorer) notRestored(ctx context.Context, r presence.Record, why string) {
	rs.log.Error("not restoring handler: its holds stay as they are and no webhook is written for it until an instance signs in as it",
		"handler", r.Handler, "user", r.User.Name, "why", why)
	rs.opts.Recorder.Event(rs.lease(r.Handler), true, reasonNotRestored, fmt.Sprintf(
		"handler %q not restored: %s. Its holds stay as they are, its recorded sweep is ignored and no webhook is written for it, "+
			"until an instance signs in as it or `broker release --handler %s`", r.Handler, why, r.Handler))
	if why != r.Marks.NotRestored {
		if err := rs.opts.Presence.MarkNotRestored(ctx, r.Handler, why); err != nil {
			rs.log.Warn("cannot mark the handler's lease not restored", "handler", r.Handler, "error", err)
		}
	}
}

// lease is the handler's presence Lease, as Events name it.
func (rs *restorer) lease(handler string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("coordination.k8s.io/v1")
	u.SetKind("Lease")
	u.SetNamespace(rs.opts.Presence.Namespace)
	u.SetName(presence.LeaseName(handler))
	return u
}
