package dispatch

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/presence"
)

// stuckScan looks at a handler's holds every few seconds, off the workers'
// path: it samples the gauges of its holds and retries, and finds the holds
// on objects being deleted that stayed past Options.StuckAfter. Each such
// object gets one HoldStuck Event per reason (contract.WhyHeld), and the
// oldest are recorded on the handler's Lease for `broker status`.
type stuckScan struct {
	*handler
	// scanning makes one scan at a time (tests call scan directly); posted
	// is the reason of the HoldStuck Event posted for each object stuck
	// now, the scan's own.
	scanning sync.Mutex
	posted   map[types.UID]string

	// mu guards last alone: the presence keeper reads it under its own
	// lock, which a scan takes (presence.now) while it runs.
	mu   sync.Mutex
	last presence.Stuck
}

// stuckEvery is how often the scan runs: often enough to see a hold stuck
// soon after --stuck-after, at most every 10 s.
func stuckEvery(after time.Duration) time.Duration {
	return min(max(after/4, time.Second), 10*time.Second)
}

func (s *stuckScan) run(ctx context.Context) {
	t := s.clock.NewTicker(stuckEvery(s.opts.StuckAfter))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		s.scan()
	}
}

// stuck is the Lease's record of the stuck holds, as last scanned.
func (s *stuckScan) stuck() presence.Stuck {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// scanned is what the scan takes of one object under the handler's lock.
type scanned struct {
	o   *object
	obj *informer.Object
}

func (s *stuckScan) scan() {
	s.scanning.Lock()
	defer s.scanning.Unlock()
	s.handler.mu.Lock()
	objs := make([]scanned, 0, len(s.objects))
	for _, o := range s.objects {
		if o.obj != nil {
			objs = append(objs, scanned{o, o.obj})
		}
	}
	s.handler.mu.Unlock()

	now := s.clock.Now()
	// The cached JSON naming the finalizer is a cheap test of the hold,
	// exact but for an object that has the string elsewhere.
	fin := []byte(`"` + hold.Finalizer(s.name) + `"`)
	sample := metrics.HoldSample{Retrying: map[string]int{}}
	var stuck []presence.StuckObject
	stuckUIDs := map[types.UID]bool{}
	for _, sc := range objs {
		note := sc.o.stay.Load()
		if note != nil {
			for _, r := range note.retrying {
				sample.Retrying[r.binding]++
			}
		}
		if !bytes.Contains(sc.obj.Raw, fin) {
			continue
		}
		sample.Held++
		if !sc.obj.Deleting {
			continue
		}
		u, err := sc.obj.Decode()
		if err != nil || u.GetDeletionTimestamp() == nil || !hold.Has(u, s.name) {
			continue
		}
		age := now.Sub(u.GetDeletionTimestamp().Time)
		sample.OldestStuck = max(sample.OldestStuck, age)
		if age < s.opts.StuckAfter {
			continue
		}
		stay := s.stay(sc.o, u, note)
		reason, why := contract.WhyHeld(stay)
		stuck = append(stuck, presence.StuckObject{
			Resource: metrics.Resource(sc.o.res.GroupResource()), Namespace: u.GetNamespace(), Name: u.GetName(),
			Since: u.GetDeletionTimestamp().Time, Binding: stay.Binding, Reason: string(reason), Why: why,
		})
		s.post(u, age, reason, stay.Binding, why)
		stuckUIDs[u.GetUID()] = true
	}
	sample.Stuck = len(stuck)
	// An object no longer stuck gets a new Event if it is stuck again.
	for uid := range s.posted {
		if !stuckUIDs[uid] {
			delete(s.posted, uid)
		}
	}
	s.opts.Metrics.Holds().Sampled(s.name, s.bindingIDs(), sample)
	rec := record(stuck)
	s.mu.Lock()
	changed := !rec.Equal(s.last)
	s.last = rec
	s.mu.Unlock()
	if changed {
		s.presence.poke()
	}
}

// stay gathers the inputs of contract.WhyHeld for o, decoded as u. The
// dispatcher runs only on the leader, so the broker leads.
func (s *stuckScan) stay(o *object, u *unstructured.Unstructured, note *stayNote) contract.Stay {
	bindings := s.bindingsOf(o)
	st := contract.Stay{Leading: true, Presence: s.presence.now(), Policy: s.policy(bindings, u)}
	if note != nil {
		st.Refused = note.refused
		for _, r := range note.retrying {
			if !r.event {
				st.Binding, st.Attempt, st.Message = r.binding, r.attempt, r.message
				return st
			}
		}
	}
	for _, b := range bindings {
		if b.Kind != binding.Delete || !b.Holds() || !s.matches(b, u, nil) {
			continue
		}
		if st.Binding == "" || b.Policy == binding.PolicyStrict && st.Policy == contract.Strict {
			st.Binding = b.ID
		}
	}
	return st
}

// post posts the object's HoldStuck Event when its reason is not the one
// posted last.
func (s *stuckScan) post(u *unstructured.Unstructured, age time.Duration, reason contract.StayReason, bindingID, why string) {
	key := string(reason) + "/" + bindingID
	if s.posted[u.GetUID()] == key {
		return
	}
	if s.posted == nil {
		s.posted = map[types.UID]string{}
	}
	s.posted[u.GetUID()] = key
	s.opts.Recorder.Event(u, true, "HoldStuck", fmt.Sprintf("handler %q has held this object for %v of its deletion (--stuck-after %v): %s",
		s.name, age.Round(time.Second), s.opts.StuckAfter, why))
}

func (s *stuckScan) bindingIDs() []string {
	ids := make([]string, 0, len(s.bindings))
	for _, b := range s.bindings {
		if !b.Kind.IsAdmission() {
			ids = append(ids, b.ID)
		}
	}
	return ids
}

// record is the Lease's record of the stuck objects: the oldest
// presence.MaxStuckRecorded, and how many there are.
func record(stuck []presence.StuckObject) presence.Stuck {
	slices.SortFunc(stuck, func(a, b presence.StuckObject) int { return a.Since.Compare(b.Since) })
	return presence.Stuck{Total: len(stuck), Objects: stuck[:min(len(stuck), presence.MaxStuckRecorded)]}
}
