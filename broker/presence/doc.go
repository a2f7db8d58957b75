// Package presence records which handlers exist and when they were last
// seen, in one coordination.k8s.io/v1 Lease per handler in the broker's
// namespace. The Lease is renewed while any instance of the handler is
// connected, so a broker that restarts knows handlers that existed before
// it, how long they have been gone, and which bindings (and so which
// resources and holds) they had: it can still release their holds after
// their grace (rules 3c and 3d of "The contract" in docs/design.md) without
// ever having seen them connect.
package presence
