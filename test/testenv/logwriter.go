package testenv

import (
	"io"
	"strings"
	"testing"
)

// LogWriter returns a writer that sends each write to t.Log, after prefix
// and without its trailing newline (t.Log adds one). Writes after the test
// has ended are dropped: a broker or child process may still log while its
// cleanup runs.
func LogWriter(t testing.TB, prefix string) io.Writer {
	return logWriter{t: t, prefix: prefix}
}

type logWriter struct {
	t      testing.TB
	prefix string
}

func (w logWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // t.Log after the test ended panics
	w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
