package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Reading the log of a process the bench started (process.log), in
// hclog's text format, for the moments the failover benchmark measures.

// waitLog waits until p's log has a line containing s stamped after since,
// and returns its time.
func waitLog(ctx context.Context, p *process, s string, since time.Time) (time.Time, error) {
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		at, err = findLog(p.log, s, since)
		return err == nil, nil
	})
	if err != nil {
		return at, fmt.Errorf("waiting for %q in %s: %w", s, p.log, err)
	}
	return at, nil
}

// errNoLine: the log has no such line (yet).
var errNoLine = errors.New("no such line")

// findLog finds the first line of the log at path that contains s and is
// stamped after since, in hclog's text format
// ("2026-12-01T19:27:18.584Z [INFO]  broker: ...").
func findLog(path, s string, since time.Time) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		stamp, _, ok := strings.Cut(line, " ")
		if !ok || !strings.Contains(line, s) {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", stamp)
		if err == nil && at.After(since) {
			return at, nil
		}
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, errNoLine
}
