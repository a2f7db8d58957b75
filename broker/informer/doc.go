// Package informer shares dynamic informers between handlers: one informer
// per resource and scope (a namespace, or the whole cluster), started when the
// first binding needs it and stopped when the last one goes. Objects are
// read from the API server's JSON straight into an Object, the form they are
// cached in: their JSON without managedFields (the broker never reads
// those) and the few fields read on every notification. The decoded maps of
// an unstructured object, which take three to four times the bytes and most
// of the CPU of a watch, are never made.
//
// Handlers subscribe with a cache.ResourceEventHandler; like every informer
// handler, it must only enqueue and never mutate the objects it is given.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package informer
