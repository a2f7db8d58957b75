// Package informer shares dynamic informers between handlers: one informer
// per resource and scope (a namespace, or the whole cluster), started when the
// first binding needs it and stopped when the last one goes. Objects enter
// the cache as an Object: their JSON without managedFields (the broker never
// reads those) and the few fields read on every notification, not the
// decoded maps, which take three to four times the bytes.
//
// Handlers subscribe with a cache.ResourceEventHandler; like every informer
// handler, it must only enqueue and never mutate the objects it is given.
package informer
