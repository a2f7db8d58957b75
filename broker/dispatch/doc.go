// Package dispatch is the broker's controller: for each handler it keeps a
// rate-limited work queue of object UIDs fed by the shared informers, and
// workers that decide what each object needs (create, update, resume,
// delete, raw events), deliver it to the instance that owns the object, and
// write the outcome back in as few API calls as possible: the hold, the
// last-handled state, results and the handler's own patch in one guarded
// JSON patch.
//
// What becomes of a hold is not decided here: holds.go gathers the inputs
// of broker/contract (the object, the policy of the bindings that match it,
// the handler's presence, the progress of its deletion work) and the
// workers do what contract.Decide returns.
//
// Ordering follows DESIGN.md: the queue never hands one UID to two workers,
// so there is at most one delivery in flight per (handler, object UID), while
// different objects run in parallel, bounded by the instances' windows.
// Informer handlers only record the latest object and enqueue; workers never
// mutate cached objects.
package dispatch
