package dispatch

import (
	"context"
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// This file turns what the dispatcher does into metrics, and says when the
// dispatcher is ready; the rest of the package calls it in one line.

// observeDelivery records one delivery attempt and how long it took. An
// attempt cut short because the broker is stopping (ctx ended) is not recorded.
func (rt *runtime) observeDelivery(ctx context.Context, d *tetherv1.Delivery, took time.Duration, ack *tetherv1.Ack, err error) {
	m := rt.m.opts.Metrics
	if m == nil {
		return
	}
	var outcome string
	switch {
	case err == nil:
		switch ack.GetOutcome() {
		case tetherv1.Outcome_OUTCOME_OK:
			outcome = metrics.OutcomeOK
		case tetherv1.Outcome_OUTCOME_RETRY:
			outcome = metrics.OutcomeRetry
		case tetherv1.Outcome_OUTCOME_FAIL:
			outcome = metrics.OutcomeFail
		default:
			outcome = metrics.OutcomeInvalid
		}
	case errors.Is(err, session.ErrGone), errors.Is(err, session.ErrLeaving):
		outcome = metrics.OutcomeGone
	case ctx.Err() != nil:
		return
	default:
		outcome = metrics.OutcomeTimeout
	}
	m.Delivered(rt.name, kindLabel(d.GetKind()), outcome, took)
}

// kindLabel names a delivery kind in metrics: "create", "tick",
// "daemon-start". The names are worked out once: every delivery needs one.
func kindLabel(k tetherv1.DeliveryKind) string {
	if l, ok := kindLabels[k]; ok {
		return l
	}
	return kindName(k)
}

var kindLabels = func() map[tetherv1.DeliveryKind]string {
	m := make(map[tetherv1.DeliveryKind]string, len(tetherv1.DeliveryKind_name))
	for v := range tetherv1.DeliveryKind_name {
		m[tetherv1.DeliveryKind(v)] = kindName(tetherv1.DeliveryKind(v))
	}
	return m
}()

func kindName(k tetherv1.DeliveryKind) string {
	s := strings.TrimPrefix(k.String(), "DELIVERY_KIND_")
	return strings.ReplaceAll(strings.ToLower(s), "_", "-")
}

// observe records one API write of apply against obj as last read,
// and, for the object's JSON patch (w non-nil), the hold it added or
// released once it landed.
func (ow *objectWriter) observe(verb string, res resource.Resource, obj *unstructured.Unstructured, w *write, err error) {
	m := ow.opts.Metrics
	if m == nil {
		return
	}
	m.APIWrite(verb, metrics.Resource(res.GroupResource()), metrics.WriteCode(err))
	if err != nil || w == nil {
		return
	}
	held := hold.Has(obj, ow.handler)
	switch {
	case w.addHold && !held && obj.GetDeletionTimestamp() == nil:
		m.HoldAdded(ow.handler)
	case w.removeHold && held:
		m.HoldReleased(ow.handler, w.release)
	}
}

// daemonStopTimedOut notes that a daemon of obj did not acknowledge stop;
// when obj is being deleted, its hold is then released by that timeout.
func daemonStopTimedOut(o *object, obj *unstructured.Unstructured) {
	if obj.GetDeletionTimestamp() != nil {
		o.daemonTimedOut = true
	}
}

// sampleQueue records the handler's queue depth and scheduled timers.
func (rt *runtime) sampleQueue() {
	m := rt.m.opts.Metrics
	if m == nil {
		return
	}
	m.SetQueueDepth(rt.name, rt.queue.Len())
	m.TimersScheduled(rt.name, rt.sched.Len())
}

// observePresence records whether an instance is connected, and samples
// the queue while at it.
func (rt *runtime) observePresence(instances int) {
	rt.m.opts.Metrics.HandlerPresent(rt.name, instances > 0)
	rt.sampleQueue()
}

// Synced reports whether the dispatcher has restored the handlers recorded
// in Leases and every handler's informers have handed it their initial
// list: from then on it acts on the cluster as it is.
func (m *Manager) Synced() bool {
	if !m.restored.Load() {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rt := range m.handlers {
		for _, s := range rt.subs {
			if !s.HasSynced() {
				return false
			}
		}
	}
	return true
}
