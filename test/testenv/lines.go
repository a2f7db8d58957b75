package testenv

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// Lines is an io.Writer that keeps what a child process prints, line by
// line, for a test to search; each complete line also goes to Log when it
// is set. It is safe for concurrent use.
type Lines struct {
	Log io.Writer

	mu      sync.Mutex
	partial []byte
	lines   []string
}

// Write keeps the complete lines of p and holds back an unfinished one.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.partial = append(l.partial, p...)
	var complete []string
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		complete = append(complete, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	l.lines = append(l.lines, complete...)
	l.mu.Unlock()
	if l.Log != nil {
		for _, line := range complete {
			_, _ = l.Log.Write([]byte(line))
		}
	}
	return len(p), nil
}

// All returns the lines so far.
func (l *Lines) All() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// Count returns how many lines match.
func (l *Lines) Count(match func(line string) bool) int {
	n := 0
	for _, line := range l.All() {
		if match(line) {
			n++
		}
	}
	return n
}

// Any reports whether a line matches.
func (l *Lines) Any(match func(line string) bool) bool { return l.Count(match) > 0 }

// Text is the lines so far, joined by newlines.
func (l *Lines) Text() string { return strings.Join(l.All(), "\n") }
