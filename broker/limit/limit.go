package limit

import "sync"

// Counter counts what is under way. PerKey bounds each key; Total, when
// above 0, bounds all keys together. The zero value admits nothing: set
// PerKey.
type Counter struct {
	PerKey, Total int

	mu    sync.Mutex
	n     map[string]int
	total int
}

// Acquire counts one more under key unless that would pass a bound; it
// reports whether it did. Each true must be followed by one Release.
func (c *Counter) Acquire(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= c.PerKey || (c.Total > 0 && c.total >= c.Total) {
		return false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	c.total++
	return true
}

// Release counts one less under key.
func (c *Counter) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.n[key]--; c.n[key] <= 0 {
		delete(c.n, key)
	}
}

// Under is what is counted under key now.
func (c *Counter) Under(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}
