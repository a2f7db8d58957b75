// Package webhook keeps the admission webhook configurations of each handler
// in sync with its validate and mutate bindings: one
// ValidatingWebhookConfiguration and one MutatingWebhookConfiguration named
// tether-<handler>, labelled app.kubernetes.io/managed-by=tether-broker and
// tether.dev/handler=<handler>, with one webhook per binding
// (<binding-id>.<handler>.tether.dev) that sends the API server to the
// broker's admission endpoint at /admit/<handler>/<binding-id>.
//
// Every webhook leaves out Options.ExcludeUsers and ExcludeGroups, by match
// conditions, and Options.ExcludeNamespaces, by a kubernetes.io/metadata.name
// NotIn requirement added to the binding's namespaceSelector, so that a
// webhook failing closed while the broker is down cannot refuse the writes of
// the broker, of the nodes and the control plane (on cluster-scoped objects
// too), of the system namespaces, or in the broker's own namespace.
//
// A Manager remembers what each handler should have. Sync writes it when a
// handler connects, changes its bindings or goes absent past its grace (only
// STRICT bindings keep a webhook then, failing closed, so a missing handler
// never blocks the cluster unless it asked to); Start re-applies it
// periodically and when the CA bundle changes, which repairs hand edits and
// deletions. Writes happen only when the configuration differs from the one
// wanted, with Update guarded by the resourceVersion that was read, so a
// resync of an unchanged cluster writes nothing and a concurrent edit is
// never clobbered blindly. A configuration with the broker's name but
// without its labels is someone else's and is never touched.
//
// RemoveAll deletes every configuration the broker manages, by label, for
// the broker's uninstall.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package webhook
