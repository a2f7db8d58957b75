// Package raw is the limit the create/delete benchmark (go run ./test/bench)
// measures the broker against: a hand-written client-go controller that does
// what a perfect operator must for the benchmark's Widgets, and nothing more.
//
// For every new Widget it makes one JSON patch, guarded by a test of the
// resourceVersion, that adds the finalizer Finalizer and what its workload
// (package test/bench/workload) writes: the annotation ResultAnnotation
// (workload.Result) or the label workload.LabelKey (workload.Label). With
// workload.Status the patch adds the finalizer only and a merge patch of
// the status subresource sets status.handled: the
// API server takes status only through /status and nothing else there, so
// two requests are the least. For every Widget being deleted, one JSON
// patch that tests and removes its finalizer. It never writes from a stale
// cache: after a write to an object it waits until the informer shows a
// resourceVersion of it that it did not write against or make itself.
//
// The bench runs it as a process of its own (test/bench/rawcontroller), so
// that its CPU time and memory can be measured as the broker's are, and
// uses Done to know when an object has been handled.
package raw
