// Package informer shares dynamic informers between handlers: one informer
// per resource and scope (a namespace, or the whole cluster), started when the
// first binding needs it and stopped when the last one goes. managedFields are
// dropped before objects enter the cache: the broker never reads them, and on
// a large cluster they are a good part of the memory an informer costs.
//
// Handlers subscribe with a cache.ResourceEventHandler; like every informer
// handler, it must only enqueue and never mutate the objects it is given.
package informer
