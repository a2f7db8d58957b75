// Package hold is the broker's finalizer: `tether.dev/<handler>`, one per
// handler name, added to an object only where a binding needs it and removed
// when the handler's deletion work is done or the handler is gone (rules 1
// to 3 of "The contract" in docs/design.md).
//
// Holds are only ever changed with JSON patches whose `test` operations pin
// the list as it was seen, so another controller's finalizer can never be
// dropped by a broker write; a refused patch is retried on the next state
// (rule 4).
package hold
