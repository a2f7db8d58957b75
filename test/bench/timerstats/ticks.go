package timerstats

import (
	"encoding/json"
	"fmt"
	"os"
)

// Ticks is every tick a handler received, in the order its function was
// called, as parallel slices (28 bytes a tick). A handler that does not
// summarize the window itself writes it on exit, as JSON (the Python
// handler, test/bench/timerhandler/handler.py, with --ticks); the bench
// reads it with ReadTicks and summarizes it with the same Summarize as the
// Go handler.
type Ticks struct {
	UIDs   []string `json:"uids"`   // the objects, by index
	Object []int32  `json:"object"` // the tick's object: an index into UIDs
	// Arrival is when the handler function was called (unix ns).
	Arrival []int64 `json:"arrival_unix_nano"`
	// Scheduled is when the tick was due, as the broker said (the Go SDK's
	// Event.Scheduled, the Python SDK's scheduled).
	Scheduled []int64 `json:"scheduled_unix_nano"`
	// Ack is when the function returned: its ack left right after.
	Ack []int64 `json:"ack_unix_nano"`
}

// Add records one tick of the object with index object.
func (t *Ticks) Add(object int32, arrival, scheduled, ack int64) {
	t.Object = append(t.Object, object)
	t.Arrival = append(t.Arrival, arrival)
	t.Scheduled = append(t.Scheduled, scheduled)
	t.Ack = append(t.Ack, ack)
}

// Len is the number of ticks.
func (t *Ticks) Len() int { return len(t.Object) }

// check reports slices of different lengths and objects out of range.
func (t *Ticks) check() error {
	n := len(t.Object)
	if len(t.Arrival) != n || len(t.Scheduled) != n || len(t.Ack) != n {
		return fmt.Errorf("%d objects, %d arrivals, %d scheduled times and %d acks: one of each per tick",
			n, len(t.Arrival), len(t.Scheduled), len(t.Ack))
	}
	for i, o := range t.Object {
		if o < 0 || int(o) >= len(t.UIDs) {
			return fmt.Errorf("tick %d: object %d of %d", i, o, len(t.UIDs))
		}
	}
	return nil
}

// ReadTicks reads a file of Ticks and checks it.
func ReadTicks(path string) (*Ticks, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := &Ticks{}
	if err := json.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return t, nil
}
