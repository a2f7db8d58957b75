// Package broker is the Tether broker as a library: it watches the cluster
// with shared informers, serves the Connect stream to handler instances, and
// dispatches lifecycle events to them while owning the finalizers ("holds")
// it puts on objects. With Options.Admission it also serves the handlers'
// admission webhooks.
//
// docs/design.md has the contract the holds follow ("The contract", its
// rules numbered as the Events, the tests and the chaos checker name them),
// how the pieces below carry one change from the watch event to the write,
// and a glossary of the words the code uses.
//
// The pieces live in subpackages, one concept each:
//
//	resource   resolve what a binding names with discovery
//	binding    validate and compile bindings (selectors, CEL)
//	informer   shared dynamic informers, one per resource and scope
//	session    the gRPC stream of one handler instance
//	dispatch   per-handler queues and workers: causes, deliveries, writes
//	hold       the finalizer tether.dev/<handler>
//	progress   last-handled state and results stored on the object
//	jsonpatch  guarded JSON patches, so no write clobbers another's
//	timer      one heap scheduler of ticks per handler
//	presence   one Lease per handler: who is connected, since when absent
//	release    strip holds by hand or on uninstall
//	auth       TokenReview and SubjectAccessReview of handler streams
//	admission  the HTTPS endpoint the API server calls, and its certificates
//	webhook    the handlers' Validating/MutatingWebhookConfigurations
//	metrics    Prometheus metrics the other packages report to
//	kube       the typed client of the built-in resources, without client-go's scheme
//
// New builds a Broker from Options; Start runs it until its context ends.
// With Options.MetricsListen set, it also serves /metrics (Prometheus; to a
// scraper whose token may get that non-resource URL, unless MetricsOpen or
// Insecure), /healthz (200 while the process serves) and /readyz (200 once the gRPC
// server serves and, without leader election, the handlers restored from
// their Leases have synced informers; 503 again from the start of
// shutdown). With leader election every replica that serves is ready, and
// the leader marks its Pod with [LeaderLabel] for the Service.
package broker
