// Package release strips the broker's holds from objects on purpose: when
// the broker is uninstalled (its Deployment is being deleted, rule 3f of the
// hold contract) and from `broker release`, which does the same from a
// terminal or a Job while the broker is down.
//
// It finds what to look at in the handlers' presence Leases: each records
// the resources its handler's bindings named.
package release
