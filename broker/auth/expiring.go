package auth

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// expiring remembers values for a while each, at most max of them: when
// full it first drops what expired, and while everything it holds is live
// it takes nothing more, so that a flood of distinct keys (tokens, denied
// rights) cannot grow it. The token reviews and the SubjectAccessReview
// verdicts are each kept in one; allowed and denied verdicts apart, so that
// a flood of denials cannot fill the room of the rights of the handlers
// that are granted.
type expiring[K comparable, V any] struct {
	max   int
	clock clock.PassiveClock

	mu    sync.Mutex
	items map[K]expiringItem[V]
}

type expiringItem[V any] struct {
	value V
	until time.Time
}

func newExpiring[K comparable, V any](max int, clk clock.PassiveClock) *expiring[K, V] {
	return &expiring[K, V]{max: max, clock: clk, items: map[K]expiringItem[V]{}}
}

// get returns the value kept for key, unless it expired.
func (e *expiring[K, V]) get(key K) (V, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	it, ok := e.items[key]
	if !ok || !e.clock.Now().Before(it.until) {
		var zero V
		return zero, false
	}
	return it.value, true
}

// put keeps value for key for ttl, when there is room.
func (e *expiring[K, V]) put(key K, value V, ttl time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	if len(e.items) >= e.max {
		for k, it := range e.items {
			if !now.Before(it.until) {
				delete(e.items, k)
			}
		}
	}
	if len(e.items) < e.max {
		e.items[key] = expiringItem[V]{value: value, until: now.Add(ttl)}
	}
}

// len is how many values it holds, expired ones included.
func (e *expiring[K, V]) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.items)
}

// has reports whether a value is kept for key and not expired.
func (e *expiring[K, V]) has(key K) bool {
	_, ok := e.get(key)
	return ok
}
