// Package raw is the limit the create/delete benchmark (go run ./test/bench)
// measures the broker against: a hand-written client-go controller that does
// what a perfect operator must for the benchmark's Widgets, and nothing more.
//
// For every new Widget it makes one JSON patch, guarded by a test of the
// resourceVersion, that adds the finalizer Finalizer and the annotation
// ResultAnnotation; for every Widget being deleted, one JSON patch that tests
// and removes its finalizer. It never writes from a stale cache: after a
// write to an object it waits until the informer shows a newer
// resourceVersion of it.
//
// The bench runs it as a process of its own (test/bench/rawcontroller), so
// that its CPU time and memory can be measured as the broker's are, and
// uses Done to know when an object has been handled.
package raw
