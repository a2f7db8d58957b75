package dispatch

import (
	"strings"

	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// This file turns what the dispatcher does into metrics, and says when the
// dispatcher is ready; the rest of the package calls it in one line.

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

// measure records one API write of apply and, for the object's JSON patch
// of w (req non-nil), the hold it added or released once it landed.
func (ow *objectWriter) measure(verb string, res resource.Resource, req *request, w *write, err error) {
	m := ow.opts.Metrics
	if m == nil {
		return
	}
	m.API().Wrote(verb, metrics.Resource(res.GroupResource()), metrics.WriteCode(err))
	if err != nil || req == nil {
		return
	}
	switch held := req.held; {
	case w.addHold && !held && !req.deleting:
		m.Holds().Added(ow.handlerName)
	case w.removeHold && held:
		m.Holds().Released(ow.handlerName, w.release)
	}
}

// daemonStopTimedOut notes that a daemon of o did not acknowledge stop;
// when o is being deleted, its hold is then released by that timeout.
func daemonStopTimedOut(o *object) {
	if o.cur.Deleting {
		o.daemonTimedOut = true
	}
}

// sampleQueue records the handler's queue depth and scheduled timers.
func (rt *controller) sampleQueue() {
	m := rt.opts.Metrics
	if m == nil {
		return
	}
	m.SetQueueDepth(rt.name, rt.queue.Len())
	m.TimersScheduled(rt.name, rt.sched.Len())
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
	for _, rt := range m.controllers {
		for _, s := range rt.subs {
			if !s.HasSynced() {
				return false
			}
		}
	}
	return true
}
