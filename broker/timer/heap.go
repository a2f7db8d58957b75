package timer

import "time"

// entry is one place in the heap. Its due time is held inline, so that
// sifting compares values of one slice: with the time behind a pointer,
// every comparison in a heap of 100,000 keys was a cache miss, and the
// heap's upkeep 10% of the broker's CPU at 10,000 ticks a second.
type entry struct {
	at  time.Time
	it  *item
	gen uint64 // it.gen when pushed; another gen means stale
}

// live reports whether e is still its item's schedule.
func (e *entry) live() bool { return e.gen == e.it.gen }

// dueHeap is a 4-ary min-heap of entries by due time that may hold stale
// entries: rescheduling pushes a new entry rather than moving the old one.
// When half of it is stale, it drops them all at once, so it never holds
// more than about twice the live keys.
type dueHeap struct {
	entries []entry
	stale   int
}

// arity is the children of a node: half the depth of a binary heap, so a
// sift touches about half as many cache lines.
const arity = 4

func (h *dueHeap) any() bool   { return len(h.entries) > 0 }
func (h *dueHeap) top() *entry { return &h.entries[0] }
func (h *dueHeap) len() int    { return len(h.entries) - h.stale }
func (h *dueHeap) less(i, j int) bool {
	return h.entries[i].at.Before(h.entries[j].at)
}

// staled counts one more stale entry and compacts when they are half.
func (h *dueHeap) staled() {
	h.stale++
	if h.stale < 64 || h.stale*2 < len(h.entries) {
		return
	}
	live := h.entries[:0]
	for _, e := range h.entries {
		if e.live() {
			live = append(live, e)
		}
	}
	clear(h.entries[len(live):])
	h.entries, h.stale = live, 0
	for i := (len(live) - 2) / arity; i >= 0; i-- {
		h.down(i)
	}
}

func (h *dueHeap) push(e entry) {
	h.entries = append(h.entries, e)
	h.up(len(h.entries) - 1)
}

// pop takes the earliest entry off; a stale one is no longer counted.
func (h *dueHeap) pop() entry {
	n := len(h.entries) - 1
	e := h.entries[0]
	h.entries[0] = h.entries[n]
	h.entries[n] = entry{}
	h.entries = h.entries[:n]
	h.down(0)
	if !e.live() {
		h.stale--
	}
	return e
}

func (h *dueHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / arity
		if !h.less(i, parent) {
			return
		}
		h.entries[i], h.entries[parent] = h.entries[parent], h.entries[i]
		i = parent
	}
}

func (h *dueHeap) down(i int) {
	n := len(h.entries)
	for {
		least := i
		first := arity*i + 1
		for c := first; c < min(first+arity, n); c++ {
			if h.less(c, least) {
				least = c
			}
		}
		if least == i {
			return
		}
		h.entries[i], h.entries[least] = h.entries[least], h.entries[i]
		i = least
	}
}
