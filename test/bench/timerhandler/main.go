// Command timerhandler is the Tether handler the timer benchmark
// (go run ./test/bench -timers) runs as a separate process: one timer
// binding on the Widgets of one namespace whose function only acks. For
// every tick it records the arrival time (when the function is called) and
// the lateness, arrival − Event.Scheduled.
//
// Every second it writes a small JSON progress file (-stats: ticks so far,
// objects that had at least one tick); the bench waits on it for the
// warm-up. When it gets SIGTERM it stops (the SDK drains and says goodbye),
// reads the measurement window the bench wrote to -window-file, and writes a
// summary of the window to -summary. The three files are JSON, in the
// formats of package test/bench/timerstats. The progress file and the
// summary are written to a temporary name and renamed, so a reader never
// sees half of one.
//
// The summary is timerstats.Summarize's, which the bench also applies to
// the ticks the Python handler (handler.py, beside this file) records: it
// counts ticks by when they were due, as the timers' own schedules define
// it (a sharp timer's on its grid, any other's one interval after the
// broker received the previous ack, reconstructed from Event.Scheduled and
// the handler's ack times); -tolerance is Schedule.Tolerance.
//
//	timerhandler -addr 127.0.0.1:7443 -namespace bench-timers-1s-10000 -interval 1s \
//		-stats stats.json -window-file window.json -summary summary.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/bench/cpuprofile"
	"github.com/tether-dev/tether/test/bench/timerstats"
)

// blockTicks is how many ticks one block of the recorder holds (1.8 MiB).
const blockTicks = 1 << 16

// block is one fixed-size piece of the record, in the columns of
// timerstats.Ticks.
type block struct {
	object                    [blockTicks]int32
	arrival, scheduled, acked [blockTicks]int64
}

// recorder keeps every tick, 28 bytes each: about 120 MiB for 100,000
// objects at 10 s over a warm-up of seven minutes and a 30 s window. It
// grows by blocks and never copies what it holds: the slices of
// timerstats.Ticks grown by append copied up to 100 MiB at a time under
// the lock, and every delivery of the handler's window waited for the copy,
// a stall the bench then measured as the broker's lateness.
type recorder struct {
	mu     sync.Mutex
	uids   []string
	ids    map[string]int32 // index into uids
	blocks []*block
	n      int // ticks recorded
}

func (r *recorder) tick(_ context.Context, ev *sdk.Event) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.ids[ev.UID]
	if !ok {
		id = int32(len(r.uids))
		r.ids[ev.UID] = id
		r.uids = append(r.uids, ev.UID)
	}
	if r.n == len(r.blocks)*blockTicks {
		r.blocks = append(r.blocks, new(block))
	}
	b, i := r.blocks[r.n/blockTicks], r.n%blockTicks
	b.object[i], b.arrival[i], b.scheduled[i] = id, now.UnixNano(), ev.Scheduled.UnixNano()
	// The ack leaves when the function returns, right after this.
	b.acked[i] = time.Now().UnixNano()
	r.n++
	return nil
}

func (r *recorder) stats() timerstats.Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return timerstats.Progress{Ticks: int64(r.n), Objects: len(r.ids), LastUnixNano: time.Now().UnixNano()}
}

// ticks returns the record as timerstats.Ticks, in one piece: the copy is
// made once, when the run is over.
func (r *recorder) ticks() *timerstats.Ticks {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &timerstats.Ticks{
		UIDs:      r.uids,
		Object:    make([]int32, 0, r.n),
		Arrival:   make([]int64, 0, r.n),
		Scheduled: make([]int64, 0, r.n),
		Ack:       make([]int64, 0, r.n),
	}
	for k, b := range r.blocks {
		m := min(blockTicks, r.n-k*blockTicks)
		t.Object = append(t.Object, b.object[:m]...)
		t.Arrival = append(t.Arrival, b.arrival[:m]...)
		t.Scheduled = append(t.Scheduled, b.scheduled[:m]...)
		t.Ack = append(t.Ack, b.acked[:m]...)
	}
	return t
}

// summary computes the summary; w may be nil.
func (r *recorder) summary(w *timerstats.Window, sc timerstats.Schedule) timerstats.Summary {
	return timerstats.Summarize(r.ticks(), w, sc)
}

// writeJSON writes v to path through a temporary file and a rename.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7443", "broker gRPC address HOST:PORT (insecure mode)")
	name := flag.String("name", "timers", "handler name; the hold is tether.dev/<name>")
	namespace := flag.String("namespace", "", "namespace whose Widgets get a timer each (required)")
	interval := flag.Duration("interval", time.Second, "timer interval")
	sharp := flag.Bool("sharp", false, "tick on a fixed grid of the interval (sdk.Sharp) instead of one interval after each ack")
	tolerance := flag.Duration("tolerance", 0, "how much later than expected (after the ack, or on the grid) the next tick may be due before\nthe ticks in between count as missed (default: half the interval)")
	noHold := flag.Bool("no-hold", false, "sdk.Finalizer(sdk.FinalizerNone): the timer holds no object")
	window := flag.Int("window", 256, "deliveries handled at once")
	statsPath := flag.String("stats", "", "write progress (ticks, objects) to this JSON `file` every second")
	windowPath := flag.String("window-file", "", "on exit, read the measurement window from this JSON `file`")
	summaryPath := flag.String("summary", "", "on exit, write the summary to this JSON `file` (default: stdout)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this `file`")
	logLevel := flag.String("log-level", "warn", "log level: trace, debug, info, warn, error")
	flag.Parse()
	if *namespace == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "timerhandler: -namespace is required and no arguments are accepted")
		os.Exit(2)
	}
	stopProfile, err := cpuprofile.Start(*cpuProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "timerhandler:", err)
		os.Exit(1)
	}

	rec := &recorder{ids: map[string]int32{}}
	h := sdk.New(*name,
		sdk.WithInsecure(),
		sdk.WithWindow(*window),
		sdk.WithReconnectBackoff(50*time.Millisecond, time.Second),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{
			Name: "timer-handler", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr,
		})),
	)
	opts := []sdk.BindingOption{sdk.ID("tick"), sdk.Namespaces(*namespace)}
	if *sharp {
		opts = append(opts, sdk.Sharp())
	}
	if *noHold {
		opts = append(opts, sdk.Finalizer(sdk.FinalizerNone))
	}
	h.OnTimer(sdk.GVR("test.tether.dev", "v1", "widgets"), *interval, rec.tick, opts...)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	if *statsPath != "" {
		wg.Go(func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				if err := writeJSON(*statsPath, rec.stats()); err != nil {
					fmt.Fprintln(os.Stderr, "timerhandler: writing stats:", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	runErr := h.Run(ctx, *addr)
	stop()
	wg.Wait()
	stopProfile()
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "timerhandler:", runErr)
		os.Exit(1)
	}

	var w *timerstats.Window
	if *windowPath != "" {
		data, err := os.ReadFile(*windowPath)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintln(os.Stderr, "timerhandler: no window file; summary without window")
		case err != nil:
			fmt.Fprintln(os.Stderr, "timerhandler:", err)
			os.Exit(1)
		default:
			w = &timerstats.Window{}
			if err := json.Unmarshal(data, w); err != nil {
				fmt.Fprintf(os.Stderr, "timerhandler: reading %s: %v\n", *windowPath, err)
				os.Exit(1)
			}
		}
	}
	s := rec.summary(w, timerstats.Schedule{Interval: *interval, Sharp: *sharp, Tolerance: *tolerance})
	if *summaryPath == "" {
		out, _ := json.MarshalIndent(s, "", "  ")
		fmt.Println(string(out))
		return
	}
	if err := writeJSON(*summaryPath, s); err != nil {
		fmt.Fprintln(os.Stderr, "timerhandler: writing summary:", err)
		os.Exit(1)
	}
}
