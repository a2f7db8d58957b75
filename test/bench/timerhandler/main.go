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
// The summary counts ticks by when they were due, as the timers' own
// schedules define it: a tick is expected when it came due inside the
// window, and delivered when it arrived, even after the window's end (the
// bench lets a drain pass before SIGTERM). A sharp timer's ticks are due on
// its grid; any other timer's tick is due one interval after the broker
// received the previous ack, which the handler sees as Event.Scheduled and
// reconstructs from its own ack times: when the next tick is due more than
// -tolerance later than (ack + interval), or never comes, the ticks that
// would have been due meanwhile are missed.
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
	"github.com/tether-dev/tether/test/bench/timerstats"
)

// recorder keeps every tick: 24 bytes each, about 15 MiB for 10,000
// objects at 1 s over 60 s (warm-up included, somewhat more).
type recorder struct {
	mu      sync.Mutex
	arrival []int64 // unix ns
	late    []int64 // ns: arrival − Scheduled
	ack     []int32 // ns from arrival to the function's return
	object  []int32 // index into ids
	ids     map[string]int32
}

func (r *recorder) tick(_ context.Context, ev *sdk.Event) error {
	now := time.Now()
	late := now.Sub(ev.Scheduled)
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.ids[ev.UID]
	if !ok {
		id = int32(len(r.ids))
		r.ids[ev.UID] = id
	}
	r.arrival = append(r.arrival, now.UnixNano())
	r.late = append(r.late, int64(late))
	r.object = append(r.object, id)
	// The ack leaves when the function returns, right after this.
	r.ack = append(r.ack, int32(min(time.Since(now), time.Second)))
	return nil
}

func (r *recorder) stats() timerstats.Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return timerstats.Progress{Ticks: int64(len(r.arrival)), Objects: len(r.ids), LastUnixNano: time.Now().UnixNano()}
}

// percentile returns the p-quantile (nearest rank) of sorted, in ms.
func percentile(sorted []int64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)]) / 1e6
}

// schedule is how the timer makes its ticks due.
type schedule struct {
	interval time.Duration
	sharp    bool
	// tolerance: how much later than expected the next tick may be due
	// before the ticks in between count as missed.
	tolerance time.Duration
}

// summary computes the summary; w may be nil.
func (r *recorder) summary(w *timerstats.Window, sc schedule) timerstats.Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := timerstats.Summary{Ticks: int64(len(r.arrival)), Objects: len(r.ids), Window: w}
	if w == nil {
		return s
	}
	from, to := w.FromUnixNano, w.ToUnixNano
	in := func(t int64) bool { return t >= from && t < to }
	iv, tol := int64(sc.interval), int64(sc.tolerance)
	// missed counts the due times base + k×interval (k ≥ 1) inside the
	// window that come more than the tolerance before next: the next tick's
	// due time, or the window's end when no tick came after.
	missed := func(base, next int64) int64 {
		var n int64
		for v := base + iv; v+tol < next; v += iv {
			if in(v) {
				n++
			}
		}
		return n
	}
	// One tick per object is in flight at a time, so arrival order is the
	// order of each object's ticks.
	byObject := make([][]int, len(r.ids))
	for i, o := range r.object {
		byObject[o] = append(byObject[o], i)
	}
	ws := &timerstats.WindowStats{}
	seconds := make([][]int64, (to-from+int64(time.Second)-1)/int64(time.Second))
	var late, slips []int64
	var sum, gaps, gapSum float64
	perObject := map[int]int{}
	for o, ticks := range byObject {
		var prevDue, prevAck, prevArrival int64
		seen := false
		for _, i := range ticks {
			at := r.arrival[i]
			due := at - r.late[i]
			if in(at) {
				ws.Arrived++
				sec := (at - from) / int64(time.Second)
				seconds[sec] = append(seconds[sec], r.late[i])
				if seen && in(prevArrival) {
					gaps++
					gapSum += float64(at - prevArrival)
				}
			}
			if seen && due == prevDue {
				// The same tick delivered again: the broker schedules the
				// next one after this ack.
				prevAck, prevArrival = at+int64(r.ack[i]), at
				continue
			}
			if seen {
				base := prevAck
				if sc.sharp {
					base = prevDue
				}
				ws.Missed += missed(base, due)
				if !sc.sharp && in(due) {
					slips = append(slips, due-prevAck-iv)
				}
			}
			if in(due) {
				ws.Delivered++
				late = append(late, r.late[i])
				sum += float64(r.late[i])
				ws.Phase[(due%iv)*10/iv]++
				perObject[o]++
			}
			prevDue, prevAck, prevArrival, seen = due, at+int64(r.ack[i]), at, true
		}
		if seen {
			base := prevAck
			if sc.sharp {
				base = prevDue
			}
			ws.Missed += missed(base, to)
		}
	}
	ws.Expected = ws.Delivered + ws.Missed
	ws.Objects = len(perObject)
	for _, l := range seconds {
		st := timerstats.SecondStats{Ticks: len(l)}
		if len(l) > 0 {
			slices.Sort(l)
			st.P50Ms, st.P99Ms, st.MaxMs = percentile(l, 0.5), percentile(l, 0.99), percentile(l, 1)
		}
		ws.PerSecond = append(ws.PerSecond, st)
	}
	s.InWindow = ws
	if gaps > 0 {
		ws.MeanPeriodMs = gapSum / gaps / 1e6
	}
	if len(slips) > 0 {
		slices.Sort(slips)
		ws.SlipP50Ms, ws.SlipP99Ms = percentile(slips, 0.5), percentile(slips, 0.99)
	}
	if len(late) == 0 {
		return s
	}
	slices.Sort(late)
	ws.P50Ms, ws.P90Ms, ws.P99Ms, ws.P999Ms = percentile(late, 0.50), percentile(late, 0.90), percentile(late, 0.99), percentile(late, 0.999)
	ws.MaxMs = float64(late[len(late)-1]) / 1e6
	ws.MeanMs = sum / float64(len(late)) / 1e6
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
	sc := schedule{interval: *interval, sharp: *sharp, tolerance: *tolerance}
	if sc.tolerance <= 0 {
		sc.tolerance = sc.interval / 2
	}
	s := rec.summary(w, sc)
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
