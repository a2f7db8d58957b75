package tracing

import "go.opentelemetry.io/otel/attribute"

// The attributes every span of the broker's about one handler's work
// carries, on a pass's spans and a review's alike; the SDKs name the
// handler and the binding the same way on theirs.
const (
	AttrHandler   = attribute.Key("tether.handler")
	AttrBinding   = attribute.Key("tether.binding.id")
	AttrNamespace = attribute.Key("k8s.namespace.name")
	AttrName      = attribute.Key("k8s.object.name")
)
