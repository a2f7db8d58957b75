package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const (
	// envHandlerDir is the handler's folder (handlerDir): where the daemon
	// of scenario session beats and a create of scenario held finds its
	// release (test/conformance/README.md).
	envHandlerDir = "TETHER_CONFORMANCE_DIR"
	// sessionName is the widget whose daemon beats while it runs.
	sessionName = "session"
	// beatPrefix starts the name of each file a run of that daemon
	// appends a line to every beatInterval.
	beatPrefix   = "session-"
	beatInterval = 100 * time.Millisecond
	// sessionBound is how long after its stream ended a daemon may still
	// beat: the instance sees the end at once and cancels its daemons.
	sessionBound = 2 * time.Second
	// beatQuiet is how long past sessionBound the kit keeps watching: a
	// daemon still running beats several times within it.
	beatQuiet = 5 * beatInterval
	// beatPoll is how often the kit looks at the files' sizes.
	beatPoll = 50 * time.Millisecond
)

// daemonSession starts a daemon that beats while it runs, ends its session
// as a broker going away does, and watches the beats: the daemon's runs
// from before the end must stop beating within sessionBound of it. The
// handler then connects again, the broker starts the daemon again on the
// new session, and the widget is deleted.
func (k *kit) daemonSession(ctx context.Context) error {
	if err := k.createWidget(ctx, sessionName, "session", daemonLabel); err != nil {
		return err
	}
	if _, err := k.awaitAcks(ctx, sessionName, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, 1); err != nil {
		return err
	}
	var before map[string]int64
	if err := k.poll(ctx, "beat of widget "+sessionName+"'s daemon in $"+envHandlerDir, func(context.Context) (bool, error) {
		var err error
		before, err = beats(k.handlerDir())
		return len(before) > 0, err
	}); err != nil {
		return err
	}
	k.wire.mu.Lock()
	s := k.wire.liveStreamLocked()
	k.wire.mu.Unlock()
	if s == nil {
		return errors.New("no session going on to end")
	}
	k.wire.renew(0)
	if err := k.wire.awaitErr(ctx, "end of the session the kit cut", func() bool { return s.ended }); err != nil {
		return err
	}
	k.wire.mu.Lock()
	ended := s.endedAt
	k.wire.mu.Unlock()
	last, err := k.watchBeats(ctx, before, ended.Add(sessionBound+beatQuiet))
	if err != nil {
		return err
	}
	judged := stoppedWithin(last, ended, sessionBound)
	// The broker starts the daemon again on the next session; deleted, it
	// stops there, and the widget goes, even when the rule failed: a daemon
	// left running would delay the next scenarios' sessions.
	if _, err := k.awaitAcks(ctx, sessionName, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, 2); err != nil {
		return errors.Join(judged, fmt.Errorf("%w: the broker starts the daemon again on the next session", err))
	}
	return errors.Join(judged, k.deleteAndAwaitGone(ctx, sessionName))
}

// handlerDir is the folder the kit gives the handler in $TETHER_CONFORMANCE_DIR.
func (k *kit) handlerDir() string { return filepath.Join(k.opts.dir, "beats") }

// beats are the sizes of the daemon's beat files in dir, by name.
func beats(dir string) (map[string]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon's beats: %w", err)
	}
	sizes := map[string]int64{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), beatPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("reading the daemon's beats: %w", err)
		}
		if info.Size() > 0 {
			sizes[e.Name()] = info.Size()
		}
	}
	return sizes, nil
}

// watchBeats looks at the files of from every beatPoll until until, and
// returns, for each, when the kit last saw it grow (the zero time when it
// did not).
func (k *kit) watchBeats(ctx context.Context, from map[string]int64, until time.Time) (map[string]time.Time, error) {
	size := map[string]int64{}
	last := map[string]time.Time{}
	for name, n := range from {
		size[name], last[name] = n, time.Time{}
	}
	tick := time.NewTicker(beatPoll)
	defer tick.Stop()
	for time.Now().Before(until) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		now, err := beats(k.handlerDir())
		if err != nil {
			return nil, err
		}
		for name := range size {
			if now[name] > size[name] {
				size[name], last[name] = now[name], time.Now()
			}
		}
	}
	return last, nil
}

// stoppedWithin fails when a run of the daemon was seen beating more than
// bound after its stream ended at ended.
func stoppedWithin(last map[string]time.Time, ended time.Time, bound time.Duration) error {
	if len(last) == 0 {
		return errors.New("no run of the daemon beat before its session ended: nothing to judge")
	}
	names := make([]string, 0, len(last))
	for name := range last {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if after := last[name].Sub(ended); after > bound {
			return fmt.Errorf("the daemon that beats in %s still ran %v after its stream ended, over %v: the instance must stop its daemons with the session",
				name, after.Round(10*time.Millisecond), bound)
		}
	}
	return nil
}
