package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/tether-dev/tether/broker/binding"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// rawEvents delivers the watch events queued for an object's event
// bindings, in order, apart from the rest of its work.
type rawEvents struct {
	*handler
	deliver delivery
}

// flush delivers the queued watch events to the event bindings,
// the oldest first. Each binding gets them in order, so a binding in
// backoff gets none after the one it is retrying; it holds up only
// itself, the others go on with the later events. It returns how soon the
// first binding in backoff is due (none: none is).
func (r *rawEvents) flush(ctx context.Context, o *object) result {
	var wait time.Duration
	var waiting map[string]bool // the bindings in backoff
	bindings := r.bindingsOf(o)
	for from := uint64(0); ; {
		r.mu.Lock()
		ev, ok := o.rawEventFrom(from)
		r.mu.Unlock()
		if !ok && from == 0 {
			return goOn // none queued
		}
		if !ok {
			break
		}
		from = ev.seq + 1
		obj, err := ev.obj.Decode()
		if err != nil {
			return failedWith(fmt.Errorf("decoding the raw %s event of %s/%s: %w", ev.typ, ev.obj.Namespace, ev.obj.Name, err))
		}
		for _, b := range bindings {
			if b.Kind != binding.Event || waiting[b.ID] || o.work.eventNext[b.ID] > ev.seq {
				continue
			}
			if r.matches(b, obj, nil) {
				d := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_EVENT, Object: ev.obj.Raw, EventType: ev.typ, Ref: ref(*o.res, ev.obj)}
				rep := r.deliver.call(ctx, o, b, d)
				if rep.aborts() {
					return rep.result
				}
				if rep.after > 0 {
					if waiting == nil {
						waiting = map[string]bool{}
					}
					waiting[b.ID] = true
					wait = sooner(wait, rep.after)
					continue
				}
			}
			if o.work.eventNext == nil {
				o.work.eventNext = map[string]uint64{}
			}
			o.work.eventNext[b.ID] = ev.seq + 1
		}
	}
	r.mu.Lock()
	o.dropFinishedRaw(bindings)
	r.mu.Unlock()
	return lookAgainIn(wait)
}

// rawEventFrom is the oldest queued raw event numbered seq or later. o's
// lock (handler.mu) must be held. The queue's numbers run without a gap:
// events are added at its end and dropped from its start.
func (o *object) rawEventFrom(seq uint64) (rawEvent, bool) {
	if len(o.events) == 0 {
		return rawEvent{}, false
	}
	i := uint64(0)
	if head := o.events[0].seq; seq > head {
		i = seq - head
	}
	if i >= uint64(len(o.events)) {
		return rawEvent{}, false
	}
	return o.events[i], true
}

// dropFinishedRaw forgets the queued raw events every event binding of
// bindings has finished. o's lock (handler.mu) must be held: the informer
// queues more meanwhile, numbered from 0 again once the queue is empty.
func (o *object) dropFinishedRaw(bindings []*binding.Binding) {
	n := 0
	for n < len(o.events) && o.finishedRaw(bindings, o.events[n].seq) {
		n++
	}
	o.events = o.events[n:]
	if len(o.events) == 0 {
		o.events = nil
		o.work.eventNext = nil
	}
}

// finishedRaw reports whether every event binding of bindings has finished
// the raw event numbered seq.
func (o *object) finishedRaw(bindings []*binding.Binding, seq uint64) bool {
	for _, b := range bindings {
		if b.Kind == binding.Event && o.work.eventNext[b.ID] <= seq {
			return false
		}
	}
	return true
}

// drop forgets the raw events queued for o and what the event
// bindings did of them; queued says the pass saw some.
func (r *rawEvents) drop(o *object, queued bool) {
	o.work.eventNext, o.work.eventTries = nil, tries{}
	if !queued {
		return
	}
	r.mu.Lock()
	n := len(o.events)
	o.events = nil
	r.mu.Unlock()
	if n > 0 {
		r.log.Debug("raw events dropped: the handler is past its grace", "uid", o.uid, "events", n)
	}
}
