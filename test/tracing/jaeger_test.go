package tracing

import (
	"testing"

	"github.com/tether-dev/tether/test/controlplane"
)

// span is a span of a trace read back from Jaeger.
type span = controlplane.Span

// logTree logs the spans as a tree.
func logTree(t *testing.T, what string, spans []*span) {
	t.Helper()
	t.Logf("%s:\n%s", what, controlplane.RenderTrace(spans, "tether.binding.id", "tether.hold.add", "tether.hold.release", "tether.ack.outcome", "k8s.watch.event_type"))
}
