// Package example runs the example handler (cmd/example-handler) end to
// end: as a real process, connected to a real broker process, against a
// real control plane (package test/controlplane). Its tests are the
// stories of the example handler, the replicator and the TTL reaper with its
// validating webhook, seen from the cluster. The broker serves admission, so
// the API server calls it for the webhook; requests made with the broker's
// own credentials (the admin's, which the tests share) are let through
// unreviewed, so the webhook test impersonates another user.
//
// The exported helpers build and start those processes and watch their
// logs; the demo in test/cluster (`make demo`) uses them too. The constants
// are the example handler's interface as users see it.
package example

// The example handler's annotations and label (see cmd/example-handler).
const (
	// AnnEnabled: "true" on a Secret or ConfigMap asks for copies.
	AnnEnabled = "replicator.tether.dev/enabled"
	// AnnInclude limits the target namespaces (comma-separated).
	AnnInclude = "replicator.tether.dev/include-namespaces"
	// AnnExclude removes target namespaces (comma-separated).
	AnnExclude = "replicator.tether.dev/exclude-namespaces"
	// AnnSource on a copy names its source, "<namespace>/<name>".
	AnnSource = "replicator.tether.dev/source"
	// LabelCopy is "true" on every copy.
	LabelCopy = "replicator.tether.dev/copy"
	// ReplicatorPrefix starts every replicator annotation.
	ReplicatorPrefix = "replicator.tether.dev/"
	// AnnTTL is a Secret's lifetime, a Go duration.
	AnnTTL = "ttl.tether.dev/ttl"
	// HoldPrefix starts the finalizer of a handler: tether.dev/<handler>.
	HoldPrefix = "tether.dev/"
)
