// Package admission holds the end-to-end tests of validate and mutate
// bindings: the real kube-apiserver calls the broker's HTTPS endpoint, the
// broker forwards each review over gRPC to a handler running as a real
// process (./admissionhandler), and the answer decides what is stored. The
// benchmark BenchmarkAdmissionRoundTrip measures what the webhook adds to a
// create, against the same API server without it.
package admission
