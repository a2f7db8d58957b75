// Package binding turns the subscriptions a handler declares in Hello into
// validated, compiled bindings: the resource resolved with discovery, label
// and field selectors parsed, the CEL `when` expression compiled once, the
// finalizer policy and retry settings filled in with the broker's defaults.
//
// Everything wrong with a binding is reported as a *FieldError that names the
// binding and the field, so the session can end the stream with an
// InvalidArgument status a person can act on.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package binding
