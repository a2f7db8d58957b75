// Package timer schedules every timer tick, daemon restart and other
// deferred wake-up of the broker in one min-heap served by one goroutine,
// instead of a goroutine or OS timer per object: ten thousand objects with a
// timer each cost ten thousand heap entries, not ten thousand timers.
//
// A Scheduler only says when a key is due; what a tick means is up to the
// fire function, which must be quick (it runs on the scheduler's goroutine):
// the dispatcher's marks the tick due and enqueues the object.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package timer
