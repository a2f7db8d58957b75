package dispatch

import (
	"hash/fnv"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/session"
)

// pool is one handler's connected instances, and the choice of the one
// that takes an object. Only the instances of the highest priority among
// those connected and not leaving are chosen: a developer's instance with
// a priority above the in-cluster ones' takes all the work while it is
// connected, and gives it back by leaving. Every choice comes with a
// channel that closes when the instances change: a waiter then chooses
// again, as the owner may be another.
type pool struct {
	mu        sync.Mutex
	instances []*session.Instance
	changed   chan struct{}
}

func newPool() *pool { return &pool{changed: make(chan struct{})} }

// add makes in eligible; it reports whether in is the only instance (the
// handler came back).
func (p *pool) add(in *session.Instance) (first bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instances = append(p.instances, in)
	p.signalLocked()
	return len(p.instances) == 1
}

// remove takes in out; it reports whether none is left.
func (p *pool) remove(in *session.Instance) (last bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instances = slices.DeleteFunc(p.instances, func(x *session.Instance) bool { return x == in })
	p.signalLocked()
	return len(p.instances) == 0
}

// len is how many instances are connected.
func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.instances)
}

// list is the instances connected.
func (p *pool) list() []*session.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.instances)
}

// signal wakes every waiter, to choose again.
func (p *pool) signal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalLocked()
}

func (p *pool) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// owner picks the instance for an object by rendezvous hashing on its UID
// among the instances of the highest priority, so that when instances of
// that priority come and go only the objects of those move (and when one
// of a higher priority comes, all do). An instance that said Goodbye takes
// nothing new. nil: none can.
func (p *pool) owner(uid types.UID) (*session.Instance, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *session.Instance
	var bestScore uint64
	for _, in := range p.instances {
		if in.Leaving() {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(uid))
		h.Write([]byte{0})
		h.Write([]byte(in.ID))
		// The highest priority wins, then the highest score: one pass,
		// so that an instance saying Goodbye meanwhile cannot leave the
		// choice empty.
		if s := mix64(h.Sum64()); best == nil || in.Priority > best.Priority || in.Priority == best.Priority && s > bestScore {
			best, bestScore = in, s
		}
	}
	return best, p.changed
}

// leastBusy picks, among the instances of the highest priority, the one
// with the fewest deliveries in flight, for work that belongs to no object
// yet (a review of a create).
func (p *pool) leastBusy() (*session.Instance, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *session.Instance
	for _, in := range p.instances {
		if in.Leaving() {
			continue
		}
		if best == nil || in.Priority > best.Priority || in.Priority == best.Priority && in.InFlight() < best.InFlight() {
			best = in
		}
	}
	return best, p.changed
}

// mix64 is splitmix64's finalizer. FNV alone barely changes its high bits
// for instance ids that differ in one last character ("i0", "i1"), which
// skews rendezvous hashing; mixed, the shares come out even.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
