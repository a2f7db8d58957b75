package auth

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// verdicts remember, each for a while, the rights SubjectAccessReview
// answered one way. Allowed and denied rights are kept apart, so that a
// flood of denials cannot fill the room of the allowed rights of the
// handlers that are granted.
type verdicts struct {
	ttl   time.Duration
	max   int
	clock clock.PassiveClock

	mu    sync.Mutex
	until map[string]time.Time // right key -> until when it is remembered
}

func newVerdicts(ttl time.Duration, max int, clk clock.PassiveClock) *verdicts {
	return &verdicts{ttl: ttl, max: max, clock: clk, until: map[string]time.Time{}}
}

// recently reports whether key was remembered less than ttl ago.
func (v *verdicts) recently(key string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.clock.Now().Before(v.until[key])
}

// remember keeps key for ttl, first dropping what expired when full; a
// full set of live verdicts takes nothing more until some expire.
func (v *verdicts) remember(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.clock.Now()
	if len(v.until) >= v.max {
		for k, until := range v.until {
			if !now.Before(until) {
				delete(v.until, k)
			}
		}
	}
	if len(v.until) < v.max {
		v.until[key] = now.Add(v.ttl)
	}
}
