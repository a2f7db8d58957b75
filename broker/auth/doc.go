// Package auth checks who a handler is and what it may bind. A handler
// authenticates with a bearer token the API server accepts (a ServiceAccount
// token), checked with TokenReview; for every binding the broker then asks
// SubjectAccessReview whether that identity may list and watch the resource
// in those namespaces, and patch it where the binding writes. The broker's
// own broad RBAC is never a way around the handler's.
package auth
