package limit

import (
	"sync"
	"testing"
)

func TestCounterBoundsEachKeyAndTheTotal(t *testing.T) {
	c := &Counter{PerKey: 2, Total: 3}
	steps := []struct {
		op   string // "acquire" or "release"
		key  string
		want bool // what acquire reports
	}{
		{"acquire", "a", true},
		{"acquire", "a", true},
		{"acquire", "a", false}, // a's bound
		{"acquire", "b", true},
		{"acquire", "c", false}, // the total
		{"release", "a", false},
		{"acquire", "c", true},  // a's release made room in all
		{"acquire", "a", false}, // the total again
		{"release", "b", false},
		{"acquire", "a", true}, // a had one
	}
	for i, s := range steps {
		if s.op == "release" {
			c.Release(s.key)
			continue
		}
		if got := c.Acquire(s.key); got != s.want {
			t.Errorf("step %d: Acquire(%q) = %v, want %v", i, s.key, got, s.want)
		}
	}
	if n := c.Under("a"); n != 2 {
		t.Errorf("Under(a) = %d, want 2", n)
	}
}

func TestCounterWithoutTotalBoundsOnlyKeys(t *testing.T) {
	c := &Counter{PerKey: 1}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Acquire(string(rune('a' + i%26)))
		}()
	}
	wg.Wait()
	for k := 'a'; k <= 'z'; k++ {
		if n := c.Under(string(k)); n != 1 {
			t.Errorf("Under(%c) = %d, want 1", k, n)
		}
	}
	c.Release("a")
	if c.Under("a") != 0 || !c.Acquire("a") {
		t.Error("a released key is not free again")
	}
}
