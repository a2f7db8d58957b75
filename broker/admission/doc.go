// Package admission is the broker's HTTPS admission endpoint and its
// certificates: the API server calls the broker's webhooks, and the broker
// forwards each review to a handler instance over the stream the handler
// already has, so handlers never serve HTTPS and may run anywhere.
//
// # The endpoint
//
// Server serves one path per validate or mutate binding,
//
//	POST /admit/<handler>/<binding-id>/<signature>[?timeout=10s]
//
// (see PathKey.Path), taking an admission.k8s.io/v1 AdmissionReview and
// answering one with the same apiVersion and kind and the request's uid.
// The signature is an HMAC of the handler and binding with a key kept in
// the Secret tether-admission-tls-path-key: only the API server, and those
// who may read webhook configurations, know the path. The checks go from
// cheap to dear, so that a caller who is not the API server costs little:
// a path without the right signature gets 404 and nothing else; another
// method 405; a handler with MaxReviewsPerHandler reviews under way 429; a
// binding this replica does not know 503; only then is the body read (413
// over MaxBodyBytes, 400 for a body that is not an AdmissionReview with a
// request). The
// review goes to the Reviewer (the dispatcher) with a deadline inside the
// webhook's timeout, the ?timeout= the API server adds to every webhook URL
// minus min(1 s, timeout/5), so the broker can still answer in time.
//
// The handler's answer becomes the API server's: allowed, or refused with
// its message and code (403 when it gave none), its warnings, and for a
// mutate binding its JSON patch (patchType JSONPatch). The broker checks a
// patch before passing it on: it must be an RFC 6902 patch that applies to
// the request's object and leaves an object with the same apiVersion,
// kind, name and namespace. A validate binding may not patch.
//
// # Failure policy
//
// When the handler fails (no answer within the deadline, no instance
// connected, an error, no admission answer, an invalid patch) the broker
// applies the binding's failure policy itself, rather than leaving it to
// the API server, so that it can say why: Fail refuses the request with 500
// (504 for a timeout) and a message naming the handler, the binding and the
// reason; Ignore admits it with a warning that says the same. Each failure
// is logged at Warn and counted (tether_admission_failures_total). Only
// when the broker does not know the binding (an unknown handler, or a
// replica that does not lead) does it answer 503, so that the API server
// applies the webhook's own failure policy. Reviews run concurrently; one
// slow handler holds only its own requests.
//
// # Certificates
//
// The endpoint serves the certificate of a certs.Serving (Options.Certs),
// whose CA bundle the webhook configurations carry; package certs says how
// it is generated, kept and renewed.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package admission
