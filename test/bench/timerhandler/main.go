// Command timerhandler is the Tether handler the timer benchmark
// (go run ./test/bench -timers) runs as a separate process: one timer
// binding on the Widgets of one namespace whose function only acks. For
// every tick it records the arrival time (when the function is called) and
// the lateness, arrival − Event.Scheduled.
//
// Every second it writes a small JSON progress file (-stats: ticks so far,
// objects that had at least one tick); the bench waits on it for the
// warm-up. When it gets SIGTERM it stops (the SDK drains and says goodbye),
// reads the measurement window the bench wrote to -window-file (JSON
// {"from_unix_nano":..., "to_unix_nano":...}), and writes a JSON summary of
// the ticks that arrived inside the window to -summary: count, objects,
// lateness percentiles and the mean period between two ticks of an object.
// Both files are written to a temporary name and renamed, so a reader never
// sees half of one.
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
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/sdk"
)

// Stats is the progress file, rewritten every second.
type Stats struct {
	Ticks   int64 `json:"ticks"`
	Objects int   `json:"objects"`
	// LastUnixNano is when the file was written.
	LastUnixNano int64 `json:"last_unix_nano"`
}

// Window is what the bench writes to -window-file before SIGTERM.
type Window struct {
	FromUnixNano int64 `json:"from_unix_nano"`
	ToUnixNano   int64 `json:"to_unix_nano"`
}

// Summary is written to -summary on exit.
type Summary struct {
	Ticks   int64   `json:"ticks"`   // every tick received
	Objects int     `json:"objects"` // objects that had at least one tick
	Window  *Window `json:"window,omitempty"`
	// The ticks that arrived inside the window; absent without a window.
	InWindow *WindowStats `json:"in_window,omitempty"`
}

// WindowStats describes the ticks that arrived inside the window.
type WindowStats struct {
	Delivered int64 `json:"delivered"`
	Objects   int   `json:"objects"` // objects with at least one tick in the window
	// MinPerObject and MaxPerObject are the fewest and most ticks one of
	// those objects had.
	MinPerObject int     `json:"min_per_object"`
	MaxPerObject int     `json:"max_per_object"`
	P50Ms        float64 `json:"p50_ms"`
	P90Ms        float64 `json:"p90_ms"`
	P99Ms        float64 `json:"p99_ms"`
	P999Ms       float64 `json:"p999_ms"`
	MaxMs        float64 `json:"max_ms"`
	MeanMs       float64 `json:"mean_ms"`
	// MeanPeriodMs is the mean time between two consecutive ticks of one
	// object, both inside the window.
	MeanPeriodMs float64 `json:"mean_period_ms"`
	// PerSecond breaks the window down by arrival second, to tell steady
	// lateness from bursts.
	PerSecond []SecondStats `json:"per_second"`
	// Phase counts the ticks by when they were due within the interval
	// (Scheduled modulo the interval, in tenths): all in one tenth means the
	// objects tick in step, one burst per interval.
	Phase [10]int64 `json:"phase"`
}

// SecondStats is one second of the window.
type SecondStats struct {
	Ticks int     `json:"ticks"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// recorder keeps every tick: 16 bytes each, about 10 MiB for 10,000
// objects at 1 s over 60 s (warm-up included, somewhat more).
type recorder struct {
	mu      sync.Mutex
	arrival []int64 // unix ns
	late    []int64 // ns
	object  []int32 // index into ids
	ids     map[string]int32
}

func (r *recorder) tick(_ context.Context, ev *sdk.Event) error {
	now := time.Now()
	late := now.Sub(ev.Scheduled)
	r.mu.Lock()
	id, ok := r.ids[ev.UID]
	if !ok {
		id = int32(len(r.ids))
		r.ids[ev.UID] = id
	}
	r.arrival = append(r.arrival, now.UnixNano())
	r.late = append(r.late, int64(late))
	r.object = append(r.object, id)
	r.mu.Unlock()
	return nil
}

func (r *recorder) stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Ticks: int64(len(r.arrival)), Objects: len(r.ids), LastUnixNano: time.Now().UnixNano()}
}

// percentile returns the p-quantile (nearest rank) of sorted, in ms.
func percentile(sorted []int64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)]) / 1e6
}

// summary computes the summary; w may be nil.
func (r *recorder) summary(w *Window, interval time.Duration) Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Summary{Ticks: int64(len(r.arrival)), Objects: len(r.ids), Window: w}
	if w == nil {
		return s
	}
	var late []int64
	seconds := make([][]int64, (w.ToUnixNano-w.FromUnixNano+int64(time.Second)-1)/int64(time.Second))
	var phase [10]int64
	perObject := map[int32]int{}
	lastSeen := map[int32]int64{}
	var gaps, gapSum float64
	var sum float64
	for i, at := range r.arrival {
		if at < w.FromUnixNano || at >= w.ToUnixNano {
			continue
		}
		late = append(late, r.late[i])
		sum += float64(r.late[i])
		sec := (at - w.FromUnixNano) / int64(time.Second)
		seconds[sec] = append(seconds[sec], r.late[i])
		due := at - r.late[i]
		phase[(due%int64(interval))*10/int64(interval)]++
		o := r.object[i]
		perObject[o]++
		if prev, ok := lastSeen[o]; ok {
			gaps++
			gapSum += float64(at - prev)
		}
		lastSeen[o] = at
	}
	ws := &WindowStats{Delivered: int64(len(late)), Objects: len(perObject), Phase: phase}
	for _, l := range seconds {
		st := SecondStats{Ticks: len(l)}
		if len(l) > 0 {
			slices.Sort(l)
			st.P50Ms, st.P99Ms, st.MaxMs = percentile(l, 0.5), percentile(l, 0.99), percentile(l, 1)
		}
		ws.PerSecond = append(ws.PerSecond, st)
	}
	s.InWindow = ws
	if len(late) == 0 {
		return s
	}
	slices.Sort(late)
	ms := func(ns float64) float64 { return ns / 1e6 }
	ws.P50Ms, ws.P90Ms, ws.P99Ms, ws.P999Ms = percentile(late, 0.50), percentile(late, 0.90), percentile(late, 0.99), percentile(late, 0.999)
	ws.MaxMs = ms(float64(late[len(late)-1]))
	ws.MeanMs = ms(sum / float64(len(late)))
	if gaps > 0 {
		ws.MeanPeriodMs = ms(gapSum / gaps)
	}
	ws.MinPerObject = math.MaxInt
	for _, n := range perObject {
		ws.MinPerObject = min(ws.MinPerObject, n)
		ws.MaxPerObject = max(ws.MaxPerObject, n)
	}
	return s
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
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "timerhandler: -cpuprofile:", err)
			os.Exit(1)
		}
		defer f.Close()
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
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "timerhandler:", runErr)
		os.Exit(1)
	}

	var w *Window
	if *windowPath != "" {
		data, err := os.ReadFile(*windowPath)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintln(os.Stderr, "timerhandler: no window file; summary without window")
		case err != nil:
			fmt.Fprintln(os.Stderr, "timerhandler:", err)
			os.Exit(1)
		default:
			w = &Window{}
			if err := json.Unmarshal(data, w); err != nil {
				fmt.Fprintf(os.Stderr, "timerhandler: reading %s: %v\n", *windowPath, err)
				os.Exit(1)
			}
		}
	}
	s := rec.summary(w, *interval)
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
