// Package dispatch is the broker's controller: for each handler it keeps a
// rate-limited work queue of object UIDs fed by the shared informers, and
// workers that decide what each object needs (create, update, resume,
// delete, raw events), deliver it to the instance that owns the object, and
// write the outcome back in as few API calls as possible: the hold, the
// last-handled state, results and the handler's own patch in one guarded
// JSON patch.
//
// Each handler has a controller, the controller: it feeds a queue from the
// informers, the instances, the timers and the daemons' exits, and its
// workers hand each queued object to the reconciler. A pass returns one
// result (result.go), as controller-runtime's Reconciler returns a Result:
// look again after a delay, retry with the queue's rate limit (an error),
// or let go of the object until what cut the pass short queues it again.
// The pass delivers through the delivery interface and writes through the
// writer interface, which its unit tests replace with fakes. An object's
// observed part is written under the handler's lock by the informers, the
// scheduler and the instances; a pass takes it once, as a sight, and the
// rest of the object is its worker's alone. The parts share the handler
// (handler.go) and each does one thing:
//
//   - reconciler (process.go, holds.go): one pass over one object;
//   - deliverer (deliver.go): a delivery to the object's owner, and its ack
//     turned into an outcome;
//   - timers and daemons: ticks, and daemons on the objects' owners;
//   - reviews (admit.go): admission reviews to the instances;
//   - presenceKeeper (presence.go): the grace, the Lease and the webhook
//     configurations;
//   - exits (exit.go): an object that left a filtered informer, read to
//     tell a relabelling from a deletion;
//   - sweeper (sweep.go): the holds left in scopes the handler dropped, and
//     outside the label selector its informers filter by;
//   - objectWriter (write.go, pacing.go): the writes to objects, paced;
//   - stuckScan (stuck.go): the gauges of the holds, and the holds on
//     objects being deleted that stay past StuckAfter, with why
//     (contract.WhyHeld), from what the workers publish (stay.go);
//   - pool: which instance owns which object;
//   - the trace of a pass (trace.go), when Options.Tracer is set: the
//     watch event, the wait in the queue, each delivery with its ack and
//     the trace context it carries, and the writes.
//
// Time is the injected Options.Clock's, but for the deadlines sent with
// deliveries, which end the contexts of real calls.
//
// What becomes of a hold is not decided here: holds.go gathers the inputs
// of broker/contract (the object, the policy of the bindings that match it,
// the handler's presence, the progress of its deletion work) and the
// workers do what contract.Decide returns. "The contract" in docs/design.md
// numbers its rules; "One change, from the watch event to the write" there
// follows a change through these parts.
//
// Ordering is rule 6 of that contract: the queue never hands one UID to two
// workers, so there is at most one delivery in flight per (handler, object
// UID), while different objects run in parallel, bounded by the instances'
// windows.
// Informer handlers only record the latest object and enqueue; workers never
// mutate cached objects. A binding that asks to be retried is passed over
// until its backoff runs out (tries.go), and the pass delivers what the
// object's other bindings have due: one binding in backoff holds up none
// of the others, and the pass looks again when the soonest is due.
package dispatch
