package example

import (
	"bytes"
	"context"
	"strings"
	"sync"
)

// LogWatcher is an io.Writer that keeps the lines written to it, so that
// callers can wait for a process to log something (a broker that says a
// handler connected).
type LogWatcher struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{}
}

// NewLogWatcher returns an empty LogWatcher.
func NewLogWatcher() *LogWatcher { return &LogWatcher{changed: make(chan struct{})} }

// Write records complete lines.
func (w *LogWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.lines = append(w.lines, string(w.partial[:i]))
		w.partial = w.partial[i+1:]
		added = true
	}
	if added {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	return len(p), nil
}

// Count returns how many lines contain every one of parts.
func (w *LogWatcher) Count(parts ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.countLocked(parts)
}

func (w *LogWatcher) countLocked(parts []string) int {
	n := 0
	for _, l := range w.lines {
		if containsAll(l, parts) {
			n++
		}
	}
	return n
}

// WaitCount waits until at least n lines contain every one of parts, or ctx
// ends.
func (w *LogWatcher) WaitCount(ctx context.Context, n int, parts ...string) error {
	for {
		w.mu.Lock()
		got, changed := w.countLocked(parts), w.changed
		w.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
