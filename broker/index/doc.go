// Package index streams an index binding's objects to one handler instance:
// every object that matches when the session begins, a mark that the list
// is complete, then each change, from the broker's shared informers. The
// handler keeps its in-memory views (Kopf's indices) from the stream; each
// instance gets every object, unlike deliveries, which are shared by UID.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package index
