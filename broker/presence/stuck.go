package presence

import (
	"encoding/json"
	"time"
)

// annStuck records the handler's stuck holds for `broker status`.
const annStuck = "tether.dev/stuck"

// MaxStuckRecorded bounds the stuck holds a Lease records, the oldest
// first: an annotation must stay small, and Stuck.Total still counts all.
const MaxStuckRecorded = 20

// Stuck is what the Lease records of the handler's holds on objects being
// deleted that stayed past --stuck-after.
type Stuck struct {
	// Total counts them all; Objects has the oldest MaxStuckRecorded.
	Total   int           `json:"total"`
	Objects []StuckObject `json:"objects"`
}

// StuckObject is one object held past --stuck-after: which, since when it
// is being deleted, and why the hold stays (contract.WhyHeld's words).
type StuckObject struct {
	Resource  string    `json:"resource"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	Since     time.Time `json:"since"`
	Binding   string    `json:"binding,omitempty"`
	Reason    string    `json:"reason"`
	Why       string    `json:"why"`
}

// Equal reports whether s and o record the same holds for the same reasons.
func (s Stuck) Equal(o Stuck) bool {
	if s.Total != o.Total || len(s.Objects) != len(o.Objects) {
		return false
	}
	for i := range s.Objects {
		a, b := s.Objects[i], o.Objects[i]
		if a.Resource != b.Resource || a.Namespace != b.Namespace || a.Name != b.Name ||
			!a.Since.Equal(b.Since) || a.Binding != b.Binding || a.Why != b.Why {
			return false
		}
	}
	return true
}

func encodeStuck(a map[string]string, s Stuck) {
	if s.Total == 0 {
		delete(a, annStuck)
		return
	}
	b, _ := json.Marshal(s) // strings, ints and times: cannot fail
	a[annStuck] = string(b)
}

func decodeStuck(v string) (Stuck, error) {
	var s Stuck
	if v == "" {
		return s, nil
	}
	err := json.Unmarshal([]byte(v), &s)
	return s, err
}
