// Package release strips the broker's holds from objects on purpose: when
// the broker is uninstalled (its Deployment is being deleted, rule 3f of
// "The contract" in docs/design.md) and from `broker release`, which does
// the same from a terminal or a Job while the broker is down. Remove is also how the
// broker sweeps the scopes a handler dropped from its bindings.
//
// It finds what to look at in the handlers' presence Leases: each records
// the resources its handler's bindings named, and those of the scopes it
// dropped until they are swept.
package release
