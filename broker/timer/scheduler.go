package timer

import (
	"container/heap"
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

	mu    sync.Mutex
	items itemHeap
	// byUID has every key of an object that is scheduled or has fired and
	// not been cancelled. A fired key keeps its entry, off the heap, since
	// it is usually scheduled again at once (every tick); cancelling drops
	// it. An object has a key or two: a slice of them costs a fraction of
	// a map.
	byUID map[types.UID][]*item
	wake  chan struct{}
}

type item struct {
	key   Key
	at    time.Time
	index int // in the heap; offHeap once fired
}

const offHeap = -1

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
	switch {
	case it == nil:
		it = &item{key: key, at: at}
		heap.Push(&s.items, it)
		s.byUID[key.UID] = append(s.byUID[key.UID], it)
	case it.index == offHeap:
		it.at = at
		heap.Push(&s.items, it)
	default:
		it.at = at
		heap.Fix(&s.items, it.index)
	}
	first := s.items[0] == it
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
	if it == nil || it.index == offHeap {
		return time.Time{}, false
	}
	return it.at, true
}

// Len is the number of scheduled keys.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// unscheduleLocked takes it off the heap, if it is there.
func (s *Scheduler) unscheduleLocked(it *item) {
	if it.index != offHeap {
		heap.Remove(&s.items, it.index)
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

// Start fires due keys until ctx ends.
func (s *Scheduler) Start(ctx context.Context) error {
	t := s.clock.NewTimer(time.Hour)
	defer t.Stop()
	var due []firing
	for {
		due = due[:0]
		s.mu.Lock()
		now := s.clock.Now()
		for len(s.items) > 0 && !s.items[0].at.After(now) {
			it := heap.Pop(&s.items).(*item)
			due = append(due, firing{key: it.key, at: it.at})
		}
		wait := time.Hour
		if len(s.items) > 0 {
			wait = s.items[0].at.Sub(now)
		}
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

type itemHeap []*item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h itemHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *itemHeap) Push(x any) {
	it := x.(*item)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.index = offHeap
	return it
}
