package broker

import (
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"

	"github.com/tether-dev/tether/broker/kube"
)

// eventRecorder posts Kubernetes Events through client-go's broadcaster,
// which aggregates repeats and rate-limits per object.
type eventRecorder struct {
	rec record.EventRecorder
	log hclog.Logger
}

func newEventRecorder(client kube.Interface, log hclog.Logger) (*eventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(kube.EventSink{Client: client})
	rec := b.NewRecorder(kube.Scheme, corev1.EventSource{Component: "tether-broker"})
	return &eventRecorder{rec: rec, log: log.Named("events")}, b.Shutdown
}

// maxEventMessage bounds an Event's message, which may carry a handler's
// own words (a failure, a daemon's error): the events.k8s.io API's limit
// for a note.
const maxEventMessage = 1024

// Event posts an Event about obj and logs it.
func (r *eventRecorder) Event(obj *unstructured.Unstructured, warning bool, reason, message string) {
	message = truncate(message, maxEventMessage)
	typ := corev1.EventTypeNormal
	log := r.log.Info
	if warning {
		typ = corev1.EventTypeWarning
		log = r.log.Warn
	}
	log(message, "reason", reason, "namespace", obj.GetNamespace(), "name", obj.GetName())
	ref := &corev1.ObjectReference{
		APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(),
		Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
	}
	r.rec.Event(ref, typ, reason, message)
}

// truncate shortens s to at most n bytes, on a rune boundary, marking the
// cut with an ellipsis.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
