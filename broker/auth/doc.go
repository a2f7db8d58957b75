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
// session lasts. The broker's own broad RBAC is never a way around the
// handler's.
package auth
