// Package guard keeps, until the broker has released every hold on an
// uninstall, what it needs to do so in its own namespace: its
// ServiceAccount (without which the API server refuses its token), the
// RoleBindings that grant it there and their Roles, and the leader Lease.
// A namespace deletion removes those in an order of its own, often before
// the broker's Deployment and so before the broker knows it is being
// uninstalled; on a real node the broker was refused ("Unauthorized") five
// seconds into its uninstall and every hold stayed.
//
// The leader puts [Finalizer] on them ([Protect]); the uninstall takes it
// off once the holds are released ([Unprotect]), the ServiceAccount last,
// and so does `broker release`, for a broker that can no longer run.
// Bound tokens stay valid for a minute after their ServiceAccount or Pod
// began deleting: the release must fit in that minute.
//
// Cluster-scoped grants cannot be guarded so: the last finalizer taken off
// a ClusterRole or its binding would take away the permission to take off
// the other's. Instead the leader copies the cluster-wide rules bound to it
// into a ClusterRole and binding of its own ([Grant]), which an uninstall
// by `kubectl delete -k` or `helm uninstall` does not know of. The copy is
// owned by the broker's namespace, so the garbage collector removes it once
// the namespace is gone; an uninstall that keeps the namespace removes it
// itself ([Revoke]).
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package guard
