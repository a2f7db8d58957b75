// Package progress keeps what the broker must remember about an object per
// handler on the object itself, as annotations under `<handler>.tether.dev/`:
// the last-handled state (the "essence" of the object when the handler last
// finished with it) and the results the handler asked to store.
//
// Because the record lives on the object, a restarted broker tells a new
// object (no record: create) from a changed one (record differs: update, with
// the record as the old side) from one already handled (record equal: resume)
// without any state of its own.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package progress
