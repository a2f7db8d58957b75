package broker

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/tether-dev/tether/broker/kube"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// maxHandlerRecorders bounds the Event recorders kept, one per handler and
// identity; past it the least recently used is stopped.
const maxHandlerRecorders = 64

// handlerEvents posts the Events that handlers put in their acks, each
// through a recorder of its own (client-go's broadcaster: repeats counted
// into one Event, floods rate-limited per object) whose client acts as the
// handler's identity, so that its RBAC decides where it may post.
type handlerEvents struct {
	cfg *rest.Config
	log hclog.Logger
	// impersonate is false in insecure mode: there is no identity, and
	// the Events are posted as the broker.
	impersonate bool

	mu   sync.Mutex
	recs map[string]*handlerRecorder
	used uint64
}

type handlerRecorder struct {
	rec  record.EventRecorder
	stop func()
	used uint64
}

func newHandlerEvents(cfg *rest.Config, impersonate bool, log hclog.Logger) (*handlerEvents, func()) {
	h := &handlerEvents{cfg: cfg, impersonate: impersonate, log: log.Named("handler-events"), recs: map[string]*handlerRecorder{}}
	return h, h.stop
}

// Post posts events about about (the delivery's object, unless an event
// names another) as handler, whose instance is as (nil in insecure mode).
// It does not wait for the API server.
func (h *handlerEvents) Post(handler string, as *authenticationv1.UserInfo, about corev1.ObjectReference, events []*tetherv1.HandlerEvent) {
	if len(events) > tetherv1.MaxAckEvents {
		h.log.Debug("dropping Events past the limit of an ack", "handler", handler, "dropped", len(events)-tetherv1.MaxAckEvents)
		events = events[:tetherv1.MaxAckEvents]
	}
	rec, err := h.recorder(handler, as)
	if err != nil {
		h.log.Debug("dropping a handler's Events", "handler", handler, "error", err)
		return
	}
	for _, e := range events {
		ref, typ, reason, message, err := handlerEvent(e, about)
		if err != nil {
			h.log.Debug("dropping a handler's Event", "handler", handler, "reason", e.GetReason(), "error", err)
			continue
		}
		rec.Event(&ref, typ, reason, message)
	}
}

// handlerEvent checks e against the protocol's limits, as the SDKs do,
// and returns what to post.
func handlerEvent(e *tetherv1.HandlerEvent, about corev1.ObjectReference) (ref corev1.ObjectReference, typ, reason, message string, err error) {
	switch e.GetType() {
	case tetherv1.HandlerEvent_TYPE_NORMAL:
		typ = corev1.EventTypeNormal
	case tetherv1.HandlerEvent_TYPE_WARNING:
		typ = corev1.EventTypeWarning
	default:
		return ref, "", "", "", fmt.Errorf("the Event has no type")
	}
	reason = e.GetReason()
	if reason == "" || len(reason) > tetherv1.MaxEventReasonBytes {
		return ref, "", "", "", fmt.Errorf("an Event's reason must be 1 to %d bytes, not %d", tetherv1.MaxEventReasonBytes, len(reason))
	}
	ref = about
	if r := e.GetRegarding(); r != nil {
		if r.GetKind() == "" || r.GetName() == "" || r.GetApiVersion() == "" {
			return ref, "", "", "", errors.New("the Event's regarding object needs an api_version, a kind and a name")
		}
		ref = corev1.ObjectReference{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName(), UID: types.UID(r.GetUid())}
	}
	return ref, typ, reason, truncate(e.GetMessage(), tetherv1.MaxEventMessageBytes), nil
}

// recorder returns the recorder of handler acting as as, making it on
// first use.
func (h *handlerEvents) recorder(handler string, as *authenticationv1.UserInfo) (record.EventRecorder, error) {
	key := handler
	var imp rest.ImpersonationConfig
	if h.impersonate {
		if as == nil {
			return nil, errors.New("the instance has no identity to post as")
		}
		imp = impersonation(*as)
		key += "\x00" + identityKey(imp)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.used++
	if r, ok := h.recs[key]; ok {
		r.used = h.used
		return r.rec, nil
	}
	// The config is copied only for a recorder that is made: most acks
	// with Events find theirs.
	cfg := rest.CopyConfig(h.cfg)
	cfg.Impersonate = imp
	client, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making a client that posts Events as handler %s: %w", handler, err)
	}
	if len(h.recs) >= maxHandlerRecorders {
		h.evictLocked()
	}
	b := record.NewBroadcaster()
	sink := &loggingSink{EventSink: kube.EventSink{Client: client}, log: h.log.With("handler", handler)}
	b.StartRecordingToSink(sink)
	r := &handlerRecorder{rec: b.NewRecorder(kube.Scheme, corev1.EventSource{Component: handler}), stop: b.Shutdown, used: h.used}
	h.recs[key] = r
	return r.rec, nil
}

// evictLocked stops the least recently used recorder. Shutdown waits for
// its queue to drain, so it is not done under the lock.
func (h *handlerEvents) evictLocked() {
	var oldest string
	for k, r := range h.recs {
		if oldest == "" || r.used < h.recs[oldest].used {
			oldest = k
		}
	}
	go h.recs[oldest].stop()
	delete(h.recs, oldest)
}

func (h *handlerEvents) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, r := range h.recs {
		r.stop()
		delete(h.recs, k)
	}
}

// loggingSink says at debug which Events the API server refused (the
// handler's RBAC, most likely), where client-go only logs to klog.
type loggingSink struct {
	record.EventSink
	log hclog.Logger
}

func (s *loggingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out, err := s.EventSink.Create(e)
	s.dropped(e, err)
	return out, err
}

func (s *loggingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out, err := s.EventSink.Patch(e, data)
	s.dropped(e, err)
	return out, err
}

func (s *loggingSink) dropped(e *corev1.Event, err error) {
	if err != nil {
		s.log.Debug("the API server did not take a handler's Event", "reason", e.Reason, "namespace", e.Namespace, "regarding", e.InvolvedObject.Name, "error", err)
	}
}
