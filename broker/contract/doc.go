// Package contract is the hold contract, rules 1 to 3e of "The contract" in
// docs/design.md, as pure functions: from what the broker knows of one
// object and one handler, and the time, to what becomes of the handler's
// hold on that object and which rule of the contract says so. Rule 3f (the
// broker's uninstall) is broker/release's; the rule numbers are the ones
// the Events, the tests and the chaos checker use.
//
// Nothing here reads the clock, the cluster or a session. The dispatcher
// gathers the inputs (the object as the informer shows it, the bindings
// that match it, the handler's instances and the progress of its deletion
// work), calls Decide, and does what the Decision says: the write, the
// Event naming the rule, and the next look.
//
// Two questions are answered apart, because they change at different
// times: Absence.At says where the handler stands (present, in its grace,
// absent, long absent) and when that changes by itself; Decide says what
// that means for one object.
package contract
