package auth

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
)

// Handler names are granted, not claimed: an identity may connect as
// handler x only if it may "connect" the virtual resource
// handlers.tether.dev named x in the broker's namespace, may hold with
// STRICT (which can block a deletion indefinitely) only if it may also
// "strict" it, and may connect with a priority above 0 (which takes every
// object and review of x away from the instances in the cluster) only if
// it may also "takeover" it. An admin grants them with an ordinary Role;
// nothing stores such objects.
const (
	HandlerGroup    = "tether.dev"
	HandlerResource = "handlers"
	VerbConnect     = "connect"
	VerbStrict      = "strict"
	VerbTakeover    = "takeover"
)

// handlers is the virtual resource of handler names.
var handlers = schema.GroupVersionResource{Group: HandlerGroup, Resource: HandlerResource}

// Right is one thing a handler must be allowed: a SubjectAccessReview's
// resource attributes, and the Hello field it is asked for.
type Right struct {
	Namespace string // "" is cluster-wide
	Verb      string
	Resource  schema.GroupVersionResource
	Name      string // "" is any name
	// Path, when set, makes the right one on a non-resource URL (such as
	// /metrics) instead of Resource.
	Path string
	// Binding is the index of the binding that needs the right, -1 for
	// one the Hello itself needs; Field is the binding's field, or the
	// Hello's, to name in an error.
	Binding int
	Field   string
}

// Rights lists what handler must be allowed to have bindings at priority,
// in the order they are checked, each right once (the first binding that
// needs it names it): the handler name itself in brokerNamespace (connect,
// takeover when priority is above 0, and strict when a binding is STRICT);
// list and watch of every binding's resource in its namespaces; patch where
// a binding writes or holds, because a finalizer is a write; and create of
// the webhook configurations an admission binding makes the broker write.
func Rights(brokerNamespace, handler string, priority int32, bindings []*binding.Binding) []Right {
	var s rightSet
	for _, r := range HelloRights(brokerNamespace, handler, priority) {
		s.add(r)
	}
	for i, b := range bindings {
		if b.Policy == binding.PolicyStrict {
			s.add(Right{Namespace: brokerNamespace, Verb: VerbStrict, Resource: handlers, Name: handler, Binding: i, Field: "finalizer"})
		}
	}
	for i, b := range bindings {
		for _, r := range resourceRights(i, b) {
			s.add(r)
		}
		// A webhook can refuse or change every request on its resource: the
		// broker writes one only for a handler that could write it itself.
		if cfg, ok := webhookConfigurations[b.Kind]; ok {
			s.add(Right{Verb: "create", Resource: cfg, Binding: i, Field: "kind"})
		}
	}
	return s.out
}

// rightSet keeps rights in the order they are added, each once: the first
// binding that needs a right names it.
type rightSet struct {
	out  []Right
	seen map[Right]bool
}

func (s *rightSet) add(r Right) {
	key := r
	key.Binding, key.Field = 0, ""
	if s.seen[key] {
		return
	}
	if s.seen == nil {
		s.seen = map[Right]bool{}
	}
	s.seen[key] = true
	s.out = append(s.out, r)
}

// resourceRights are binding i's list and watch of its resource in each of
// its namespaces, and patch where it writes or holds.
func resourceRights(i int, b *binding.Binding) []Right {
	namespaces := b.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var out []Right
	for _, ns := range namespaces {
		for _, verb := range verbs(b) {
			out = append(out, Right{Namespace: ns, Verb: verb, Resource: b.Resource.GroupVersionResource, Binding: i, Field: "resource"})
		}
	}
	return out
}

// HelloRights are the rights of [Rights] that the Hello itself needs, the
// first it lists: connect on the handler name, and takeover when priority
// is above 0.
func HelloRights(brokerNamespace, handler string, priority int32) []Right {
	out := []Right{{Namespace: brokerNamespace, Verb: VerbConnect, Resource: handlers, Name: handler, Binding: -1, Field: "handler"}}
	if priority > 0 {
		out = append(out, Right{Namespace: brokerNamespace, Verb: VerbTakeover, Resource: handlers, Name: handler, Binding: -1, Field: "priority"})
	}
	return out
}

var webhookConfigurations = map[binding.Kind]schema.GroupVersionResource{
	binding.Validate: {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
	binding.Mutate:   {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
}

// verbs a binding needs on its resource: it is watched; it is patched when
// its acks carry patches or when it holds.
func verbs(b *binding.Binding) []string {
	switch {
	case b.Holds():
		return []string{"list", "watch", "patch"}
	case b.Kind == binding.Event, b.Kind == binding.Index, b.Kind == binding.Delete, b.Kind == binding.Daemon, b.Kind == binding.Validate:
		return []string{"list", "watch"}
	default:
		return []string{"list", "watch", "patch"}
	}
}
