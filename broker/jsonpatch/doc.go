// Package jsonpatch builds RFC 6902 JSON patches for the broker's writes.
//
// The broker changes objects it does not own: other controllers write the same
// finalizer lists, label and annotation maps at the same time. A merge patch
// replaces a list whole and so can drop another controller's finalizer; a JSON
// patch names single elements and can carry `test` operations that make the
// API server refuse the write when the object moved underneath. Every write
// the broker makes goes through this package so that rule holds everywhere:
// rule 4 of "The contract" in docs/design.md.
package jsonpatch
