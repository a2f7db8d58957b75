// Package auth checks who a handler is and what it may do. A handler
// authenticates with a bearer token the API server accepts (a ServiceAccount
// token), checked with TokenReview (with an audience when the broker is
// given one); reviews are cached briefly, refusals too, and bounded per
// peer, so bad tokens cannot flood the API server through the broker.
//
// [Rights] says what a session needs, as SubjectAccessReview attributes:
// its handler name, granted on the virtual resource handlers.tether.dev
// (connect; strict for STRICT holds; takeover for a priority above 0,
// which takes the handler's work from its other instances); list and watch
// of every bound resource in the bound namespaces; patch where a binding
// writes or holds (a finalizer is a write); create of webhook
// configurations for admission.
// [Authenticator.Authorize] asks for each at Hello and again while the
// session lasts; [Authenticator.AuthorizeRecorded] asks the same of the
// identity a presence Lease records, before the handler is restored from
// it. The broker's own RBAC is never a way around the
// handler's, and is narrow itself: [BrokerRights] are what the broker's
// identity needs to serve the bindings (list and watch, patch where it
// writes or holds), asked with SelfSubjectAccessReview at Hello, so that a
// binding on a resource no ClusterRole labelled [AggregationLabel] grants
// the broker is refused with the rule to add.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package auth
