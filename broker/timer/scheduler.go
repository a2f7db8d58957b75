package timer

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Key names one scheduled wake-up: an object and what is due for it (a
// binding id, or another name the caller picks).
type Key struct {
	UID  types.UID
	Name string
}

// Scheduler calls Fire for each key when its time comes. The zero value is
// not usable; use New.
type Scheduler struct {
	fire  func(Key, time.Time)
	clock clock.WithTicker

	mu  sync.Mutex
	due dueHeap
	// byUID has every key of an object that is scheduled or has fired and
	// not been cancelled. A fired key keeps its entry, off the heap, since
	// it is usually scheduled again at once (every tick); cancelling drops
	// it. An object has a key or two: a slice of them costs a fraction of
	// a map.
	byUID map[types.UID][]*item
	wake  chan struct{}
}

// item is one key's schedule. Rescheduling or cancelling a key does not
// look for its entry in the heap: it bumps gen, which leaves the old entry
// stale, to be dropped when it comes to the top.
type item struct {
	key       Key
	at        time.Time
	gen       uint64
	scheduled bool
}

// New returns a Scheduler that calls fire(key, due) when key is due by clk
// (nil: the real clock). fire runs on the scheduler's goroutine and must not
// block.
func New(fire func(key Key, due time.Time), clk clock.WithTicker) *Scheduler {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Scheduler{
		fire:  fire,
		clock: clk,
		byUID: map[types.UID][]*item{},
		wake:  make(chan struct{}, 1),
	}
}

// Schedule makes key due at at, replacing any earlier schedule of key.
func (s *Scheduler) Schedule(key Key, at time.Time) {
	s.mu.Lock()
	it := s.findLocked(key)
	if it == nil {
		it = &item{key: key}
		s.byUID[key.UID] = append(s.byUID[key.UID], it)
	}
	s.unscheduleLocked(it)
	it.at, it.scheduled = at, true
	s.due.push(entry{at: at, it: it, gen: it.gen})
	first := s.due.top().live() && s.due.top().it == it
	s.mu.Unlock()
	if first {
		s.poke()
	}
}

// findLocked is the item of key, or nil.
func (s *Scheduler) findLocked(key Key) *item {
	for _, it := range s.byUID[key.UID] {
		if it.key.Name == key.Name {
			return it
		}
	}
	return nil
}

// Cancel forgets key.
func (s *Scheduler) Cancel(key Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.byUID[key.UID]
	for i, it := range items {
		if it.key.Name != key.Name {
			continue
		}
		s.unscheduleLocked(it)
		if items = slices.Delete(items, i, i+1); len(items) == 0 {
			delete(s.byUID, key.UID)
		} else {
			s.byUID[key.UID] = items
		}
		return
	}
}

// CancelUID forgets every key of an object.
func (s *Scheduler) CancelUID(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.byUID[uid] {
		s.unscheduleLocked(it)
	}
	delete(s.byUID, uid)
}

// Scheduled reports when key is due, if it is scheduled.
func (s *Scheduler) Scheduled(key Key) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.findLocked(key)
	if it == nil || !it.scheduled {
		return time.Time{}, false
	}
	return it.at, true
}

// Len is the number of scheduled keys.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.due.len()
}

// unscheduleLocked makes the heap entry of it, if it has one, stale.
func (s *Scheduler) unscheduleLocked(it *item) {
	it.gen++
	if it.scheduled {
		it.scheduled = false
		s.due.staled()
	}
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// firing is a key that came due, copied out of its item, which may be
// scheduled again as soon as the lock is released.
type firing struct {
	key Key
	at  time.Time
}

// takeDueLocked appends to due the keys due by now, in the order of their
// times, and takes them off the heap. wait is how long until the next one.
func (s *Scheduler) takeDueLocked(now time.Time, due []firing) (_ []firing, wait time.Duration) {
	for s.due.any() && !s.due.top().at.After(now) {
		if e := s.due.pop(); e.live() {
			e.it.scheduled = false
			due = append(due, firing{key: e.it.key, at: e.at})
		}
	}
	if !s.due.any() {
		return due, time.Hour
	}
	return due, s.due.top().at.Sub(now)
}

// Start fires due keys until ctx ends.
func (s *Scheduler) Start(ctx context.Context) error {
	t := s.clock.NewTimer(time.Hour)
	defer t.Stop()
	var due []firing
	for {
		s.mu.Lock()
		var wait time.Duration
		due, wait = s.takeDueLocked(s.clock.Now(), due[:0])
		s.mu.Unlock()
		for _, f := range due {
			s.fire(f.key, f.at)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-t.C():
		}
	}
}
