package main

// The timer benchmark (issue 4), go run ./test/bench -timers: for each object
// count N, timer mode (plain or sharp) and interval I, N Widgets, a fresh
// broker and an ack-only timer handler process (test/bench/timerhandler, or
// its Python twin: -timer-handler, timerhandlers.go) with OnTimer(widgets,
// I, ack, Namespaces(ns)). The Widgets of one count
// are created once, in a namespace of their own, before the first broker
// starts, so creating them does not disturb the measurement; the later runs
// find them held already, as a restarted broker does. The bench waits until
// every object had its first tick (the warm-up: with the default hold, the
// first run writes N holds first), lets one more interval pass, and then
// measures for -duration: the ticks due in the window and those of them the
// handler received (after a drain, so that ticks due just before the end
// count), their lateness (arrival − Event.Scheduled, as the handler saw it),
// the CPU the broker, the handler and kube-apiserver used (utime+stime from
// /proc/<pid>/stat), the broker's peak RSS (VmHWM) and the API writes
// (apiserver_request_total).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/bench/timerstats"
	"github.com/tether-dev/tether/test/controlplane"
)

// The goal of issue 4, for the 1 s interval.
const (
	goalInterval  = time.Second
	goalDelivered = 0.999
	goalP99       = 100 * time.Millisecond
	goalCores     = 1.0
)

// timerHandlerName is the timer handler's name; its hold is tether.dev/timers.
const timerHandlerName = "timers"

// timerDefaultWindow is the timer handler's window unless -window is given.
const timerDefaultWindow = 256

// The timer modes of -modes.
const (
	modePlain = "plain" // the next tick one interval after each ack
	modeSharp = "sharp" // sdk.Sharp: ticks on a fixed grid
)

// timerSettle is the least time between the warm-up and the window.
const timerSettle = 3 * time.Second

// timerDrain is how long the handler keeps running after the window, so
// that the ticks due just before its end arrive and count as delivered.
const timerDrain = 3 * time.Second

// pprofEnv names the variable that makes the profiling build of the broker
// serve net/http/pprof.
const pprofEnv = "TETHER_BENCH_PPROF"

// cpuProfileEnv names the variable that makes the profiling build of the
// broker write a CPU profile of its run to the file it names, until the
// bench asks at cpuProfileStopPath.
const cpuProfileEnv = "TETHER_BENCH_CPUPROFILE"

// cpuProfileStopPath is where the profiling build of the broker ends its
// CPU profile of $TETHER_BENCH_CPUPROFILE.
const cpuProfileStopPath = "/debug/bench/cpuprofile/stop"

// parseTimers checks and fills the -timers flags.
func (c *config) parseTimers(objects, intervals, modes string, windowSet bool) error {
	c.objects = nil
	for f := range strings.SplitSeq(modes, ",") {
		m := strings.TrimSpace(f)
		if m != modePlain && m != modeSharp {
			return fmt.Errorf("-modes: %q is neither %s nor %s", f, modePlain, modeSharp)
		}
		if !slices.Contains(c.modes, m) {
			c.modes = append(c.modes, m)
		}
	}
	for f := range strings.SplitSeq(objects, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("-objects: %q is not a positive count", f)
		}
		c.objects = append(c.objects, n)
	}
	for f := range strings.SplitSeq(intervals, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 100*time.Millisecond {
			return fmt.Errorf("-intervals: %q is not a duration of at least 100ms (sdk.MinTimerInterval)", f)
		}
		c.intervals = append(c.intervals, d)
	}
	if c.duration < time.Second {
		return errors.New("-duration must be at least 1s")
	}
	if c.workers < 0 {
		return errors.New("-workers must not be negative")
	}
	if !windowSet {
		c.window = timerDefaultWindow
	}
	if c.timerHandler == "" {
		c.timerHandler = timerHandlerGo
	}
	if err := checkTimerHandler(c.timerHandler); err != nil {
		return err
	}
	return nil
}

// timerRow is one run: one object count in one mode at one interval.
type timerRow struct {
	mode      string
	interval  time.Duration
	objects   int
	held      bool          // the objects were held already when the broker started
	window    time.Duration // measured
	warmup    time.Duration // from the handler's start to every object's first tick
	grid      float64       // N × window / interval
	summary   timerstats.WindowStats
	broker    float64 // cores
	handler   float64 // cores
	apiserver float64 // cores; -1 when its process was not found
	brokerRSS float64 // MiB
	hdRSS     float64 // MiB
	writes    float64 // on widgets and events
	other     map[string]float64
	load      string // at the start of the window
	loadEnd   string
	steal     string // CPU steal over the window, percent of the machine's time
	profile   string
}

// deliveredShare is the share of the ticks due in the window that arrived.
func (r timerRow) deliveredShare() float64 {
	if r.summary.Expected == 0 {
		return 0
	}
	return float64(r.summary.Delivered) / float64(r.summary.Expected)
}

// gridShare is the old measure: the ticks that arrived in the window
// against a grid of one tick per interval per object.
func (r timerRow) gridShare() float64 { return float64(r.summary.Arrived) / r.grid }

// meets reports whether the row meets the goal of issue 4, and whether the
// ticks wrote nothing.
func (r timerRow) meets() (delivered, p99, cores, noWrites bool) {
	return r.deliveredShare() >= goalDelivered,
		r.summary.P99Ms < float64(goalP99)/float64(time.Millisecond),
		r.broker < goalCores,
		r.writes == 0
}

// timerCase is one run of benchTimers.
type timerCase struct {
	n        int
	mode     string
	interval time.Duration
	ns       string
	// fresh: the namespace and its Widgets are still to be made.
	fresh bool
}

// benchTimers runs every object count in every mode at every interval.
func benchTimers(ctx context.Context, cfg *config, stderr io.Writer) (rows []timerRow, err error) {
	if isPython(cfg.timerHandler) {
		if cfg.pythonVersion, err = checkPython(ctx, cfg.python); err != nil {
			return nil, err
		}
	}
	if cfg.timerHandler == timerHandlerTypeScript {
		if cfg.nodeVersion, err = checkTypeScript(ctx); err != nil {
			return nil, err
		}
	}
	err = withEnv(ctx, cfg, stderr, timerHandlerPkg(cfg.timerHandler), func(e *env, bin binaries) error {
		if cfg.profile != "" {
			if writesTicks(cfg.timerHandler) {
				e.progressf("-profile: the broker only; the %s handler is not profiled", cfg.timerHandler)
			}
			if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
				return err
			}
			if bin.broker, err = buildProfilingBroker(ctx, e); err != nil {
				return err
			}
		}
		var cases []timerCase
		for _, n := range cfg.objects {
			for i, mode := range cfg.modes {
				for j, iv := range cfg.intervals {
					c := timerCase{n: n, mode: mode, interval: iv, ns: nsName(n, "", 0), fresh: i == 0 && j == 0}
					if cfg.spread {
						// The Widgets are created while each run's handler
						// is connected, so every run needs its own.
						c.ns, c.fresh = nsName(n, mode, iv), true
					}
					cases = append(cases, c)
				}
			}
		}
		for i, c := range cases {
			r, err := runTimers(ctx, e, bin, c)
			if err != nil {
				return fmt.Errorf("timers %s %s N=%d: %w", c.mode, c.interval, c.n, err)
			}
			rows = append(rows, r)
			if i+1 < len(cases) && cases[i+1].ns != c.ns {
				if err := clearWidgets(ctx, e, c.ns, c.n); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return rows, err
}

// pprofSource is added to cmd/broker through a build overlay: the broker on
// disk is not changed, and only the binary the bench runs serves pprof.
const pprofSource = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime/pprof"
)

func init() {
	if addr := os.Getenv("` + pprofEnv + `"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
	if path := os.Getenv("` + cpuProfileEnv + `"); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			panic(err)
		}
		// The bench asks for the profile before it stops the broker: the
		// broker exits on SIGTERM before a profile could be written then.
		http.HandleFunc("` + cpuProfileStopPath + `", func(w http.ResponseWriter, _ *http.Request) {
			pprof.StopCPUProfile()
			_ = f.Close()
		})
	}
}
`

// buildProfilingBroker builds cmd/broker with net/http/pprof served on
// $TETHER_BENCH_PPROF, by overlaying one extra file on the package.
func buildProfilingBroker(ctx context.Context, e *env) (string, error) {
	src := filepath.Join(e.work, "zz_bench_pprof.go")
	if err := os.WriteFile(src, []byte(pprofSource), 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(e.repo, "cmd", "broker", "zz_bench_pprof.go"): src,
	}})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(e.work, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(e.work, "broker-pprof")
	e.progressf("building ./cmd/broker with net/http/pprof (build overlay) for -profile")
	cmd := exec.CommandContext(ctx, "go", "build", "-overlay", ov, "-o", out, "./cmd/broker")
	cmd.Dir = e.repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the profiling broker: %v\n%s", err, b)
	}
	return out, nil
}

// timerRun is one run's processes and files.
type timerRun struct {
	e                *env
	label            string
	id               string // names its files: "plain-1s-10000"
	broker, handler  *process
	cancelWatch      context.CancelCauseFunc
	stats, win, summ string
	ticks            string // the Python handler's
	pprofAddr        string
	n                int
	interval         time.Duration
	sharp            bool
	apiserverPID     int
	stopOnce         sync.Once
	profileDone      chan struct{}
	profileErr       error
	profilePath      string
	handlerStartedAt time.Time
	warmupDoneAt     time.Time
}

// nsName names the namespace of the n Widgets shared by every run (mode
// empty), or of one run's own.
func nsName(n int, mode string, iv time.Duration) string {
	if mode == "" {
		return fmt.Sprintf("bench-timers-%d", n)
	}
	return "bench-timers-" + runID(timerCase{n: n, mode: mode, interval: iv})
}

// runID names a run's files and processes.
func runID(c timerCase) string {
	return fmt.Sprintf("%s-%s-%d", c.mode, strings.NewReplacer(".", "p", "µ", "u").Replace(c.interval.String()), c.n)
}

// runTimers is one run: c.n Widgets with a timer of c.interval in c.mode.
func runTimers(ctx context.Context, e *env, bin binaries, c timerCase) (timerRow, error) {
	n, iv := c.n, c.interval
	r := &timerRun{e: e, label: fmt.Sprintf("timers %s %s N=%d", c.mode, iv, n), id: runID(c), n: n, interval: iv, sharp: c.mode == modeSharp}
	ns := c.ns
	row := timerRow{mode: c.mode, interval: iv, objects: n, held: !c.fresh && !e.noHold}
	if c.fresh {
		e.progressf("%s: creating namespace %s and %d Widgets", r.label, ns, n)
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
			return row, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
		if !e.spread {
			if err := r.create(ctx, ns); err != nil {
				return row, err
			}
		}
	}
	defer r.stop()
	ctx, err := r.start(ctx, bin, ns)
	if err != nil {
		return row, err
	}
	if e.spread {
		// The broker sees the objects one by one as they are created, so
		// their first ticks, and the phase of every later tick, spread
		// over the creation time.
		if err := r.create(ctx, ns); err != nil {
			return row, r.cause(ctx, err)
		}
	}
	if err := r.warmUp(ctx); err != nil {
		return row, err
	}
	row.warmup = r.warmupDoneAt.Sub(r.handlerStartedAt)
	// The API server takes a good part of a core for a second to serve
	// /metrics, which would make the first ticks of the window late: the
	// writes are read before the settling time, so they cover a little
	// more than the window.
	before, err := scrapeWrites(ctx, e.kube)
	if err != nil {
		return row, err
	}
	settle := max(iv, timerSettle)
	e.progressf("%s: every object ticked %.1fs after the handler started; waiting %s more", r.label, row.warmup.Seconds(), settle)
	if err := sleepCtx(ctx, settle); err != nil {
		return row, r.cause(ctx, err)
	}

	// The window.
	row.load = loadAverage()
	stat0, statErr0 := readCPUTimes()
	cpu0, err := r.cpu()
	if err != nil {
		return row, err
	}
	t0 := time.Now()
	r.startProfile(ctx)
	if err := r.measure(ctx, t0); err != nil {
		return row, err
	}
	t1 := time.Now()
	row.loadEnd = loadAverage()
	stat1, statErr1 := readCPUTimes()
	row.steal = stealShare(stat0, stat1, statErr0, statErr1)
	cpu1, err := r.cpu()
	if err != nil {
		return row, err
	}
	after, err := scrapeWrites(ctx, e.kube)
	if err != nil {
		return row, err
	}
	row.window = t1.Sub(t0)
	wall := row.window.Seconds()
	row.broker = (cpu1[0] - cpu0[0]).Seconds() / wall
	row.handler = (cpu1[1] - cpu0[1]).Seconds() / wall
	row.apiserver = -1
	if r.apiserverPID != 0 && cpu0[2] >= 0 && cpu1[2] >= 0 {
		row.apiserver = (cpu1[2] - cpu0[2]).Seconds() / wall
	}
	if row.brokerRSS, err = peakRSS(r.broker.cmd.Process.Pid); err != nil {
		return row, err
	}
	if row.hdRSS, err = peakRSS(r.handler.cmd.Process.Pid); err != nil {
		return row, err
	}
	row.writes, row.other = writesIn(before, after)
	row.grid = float64(n) * row.window.Seconds() / iv.Seconds()

	// The handler's summary of the window, after the drain.
	if err := sleepCtx(ctx, timerDrain); err != nil {
		return row, r.cause(ctx, err)
	}
	s, err := r.finish(timerstats.Window{FromUnixNano: t0.UnixNano(), ToUnixNano: t1.UnixNano()})
	if err != nil {
		return row, err
	}
	row.summary = *s.InWindow
	if r.profileDone != nil {
		<-r.profileDone
		if r.profileErr != nil {
			e.progressf("%s: CPU profile: %v", r.label, r.profileErr)
		} else {
			row.profile = r.profilePath
		}
	}
	e.progressf("%s: %d/%d ticks (%.2f%%; grid %.2f%%), lateness p50 %.1fms p99 %.1fms max %.1fms, broker %.2f cores, handler %.2f cores, writes %.0f",
		r.label, row.summary.Delivered, row.summary.Expected, 100*row.deliveredShare(), 100*row.gridShare(),
		row.summary.P50Ms, row.summary.P99Ms, row.summary.MaxMs, row.broker, row.handler, row.writes)
	return row, nil
}

// create makes the n Widgets with the bench's fast client, before the
// broker starts.
func (r *timerRun) create(ctx context.Context, ns string) error {
	var sent atomic.Int64
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- sendLoad(ctx, r.e.load, ns, 0, r.n, false, &sent) }()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("creating the Widgets: %w", err)
			}
			el := time.Since(start).Seconds()
			r.e.progressf("%s: %d Widgets created in %.1fs (%.0f/s)", r.label, r.n, el, float64(r.n)/el)
			return nil
		case <-t.C:
			r.e.progressf("%s: %d/%d Widgets created", r.label, sent.Load(), r.n)
		}
	}
}

// start starts the broker and the timer handler.
func (r *timerRun) start(ctx context.Context, bin binaries, ns string) (context.Context, error) {
	e := r.e
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--insecure", "--listen", addr, "--kubeconfig", e.cp.KubeconfigPath(),
		"--kube-api-qps", strconv.FormatFloat(e.qps, 'f', -1, 64), "--kube-api-burst", strconv.Itoa(e.burst),
		"--log-level", "warn"}
	if e.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(e.workers))
	}
	var environ []string
	if e.profile != "" {
		if r.pprofAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		environ = []string{pprofEnv + "=" + r.pprofAddr}
	}
	if r.broker, err = startProcessEnv(e, "broker-"+r.id, bin.broker, environ, args...); err != nil {
		return nil, err
	}
	ctx, r.cancelWatch = context.WithCancelCause(ctx)
	go r.watch(r.broker)
	if err := waitServing(ctx, addr); err != nil {
		return nil, r.cause(ctx, fmt.Errorf("waiting for the broker's gRPC health service: %w", err))
	}
	prog, hargs, henv := r.handlerCommand(bin, addr, ns)
	r.handlerStartedAt = time.Now()
	if r.handler, err = startProcessEnv(e, "handler-"+r.id, prog, henv, hargs...); err != nil {
		return nil, err
	}
	go r.watch(r.handler)
	r.apiserverPID = childPID("kube-apiserver")
	return ctx, nil
}

func (r *timerRun) watch(p *process) {
	<-p.done
	r.cancelWatch(p.exited())
}

func (r *timerRun) cause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if r.e.interrupted() {
		return errors.New("interrupted")
	}
	return err
}

// readStats reads the handler's progress file; zero before its first write.
func (r *timerRun) readStats() (timerstats.Progress, error) {
	var s timerstats.Progress
	data, err := os.ReadFile(r.stats)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

// warmUp waits until every object had its first tick.
func (r *timerRun) warmUp(ctx context.Context) error {
	deadline := time.Now().Add(r.e.timeout)
	lastReport := time.Now()
	heapTaken := r.pprofAddr == ""
	for {
		s, err := r.readStats()
		if err != nil {
			return err
		}
		if !heapTaken && s.Objects >= r.n/2 {
			// Halfway, most objects still wait for their hold: the broker's
			// live heap then is about its peak.
			heapTaken = true
			path := filepath.Join(r.e.profile, "broker-"+r.id+"-warmup-heap.pprof")
			if err := fetchProfile(ctx, "http://"+r.pprofAddr+"/debug/pprof/heap?gc=1", path); err != nil {
				return fmt.Errorf("-profile: %w", err)
			}
			r.e.progressf("%s: heap profile of the broker halfway through the warm-up: %s", r.label, path)
		}
		if s.Objects >= r.n {
			r.warmupDoneAt = time.Now()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d/%d objects had a tick within -timeout %s", s.Objects, r.n, r.e.timeout)
		}
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			r.e.progressf("%s: warm-up: %d/%d objects ticked, %d ticks, after %.0fs",
				r.label, s.Objects, r.n, s.Ticks, time.Since(r.handlerStartedAt).Seconds())
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return r.cause(ctx, err)
		}
	}
}

// measure waits out the window, printing the tick rate every 10 s.
func (r *timerRun) measure(ctx context.Context, t0 time.Time) error {
	r.e.progressf("%s: measuring for %s (load average %s)", r.label, r.e.duration, loadAverage())
	end := t0.Add(r.e.duration)
	prev, _ := r.readStats()
	prevAt := time.Now()
	for {
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		if err := sleepCtx(ctx, min(left, 10*time.Second)); err != nil {
			return r.cause(ctx, err)
		}
		s, err := r.readStats()
		if err != nil {
			return err
		}
		now := time.Now()
		// The file is rewritten every second, so the rate is approximate.
		rate := float64(s.Ticks-prev.Ticks) / now.Sub(prevAt).Seconds()
		r.e.progressf("%s: %.0fs: about %.0f ticks/s (expected %.0f/s)", r.label, now.Sub(t0).Seconds(), rate, float64(r.n)/r.interval.Seconds())
		prev, prevAt = s, now
	}
}

// cpu reads the CPU time of the broker, the handler and kube-apiserver (-1
// when its process is unknown).
func (r *timerRun) cpu() ([3]time.Duration, error) {
	var c [3]time.Duration
	var err error
	if c[0], err = cpuTime(r.broker.cmd.Process.Pid); err != nil {
		return c, err
	}
	if c[1], err = cpuTime(r.handler.cmd.Process.Pid); err != nil {
		return c, err
	}
	c[2] = -1
	if r.apiserverPID != 0 {
		if v, err := cpuTime(r.apiserverPID); err == nil {
			c[2] = v
		}
	}
	return c, nil
}

// startProfile fetches a CPU profile of the broker covering the window.
func (r *timerRun) startProfile(ctx context.Context) {
	if r.pprofAddr == "" {
		return
	}
	r.profileDone = make(chan struct{})
	r.profilePath = filepath.Join(r.e.profile, "broker-"+r.id+".pprof")
	secs := max(1, int(r.e.duration.Round(time.Second)/time.Second))
	base := strings.TrimSuffix(r.profilePath, ".pprof")
	go func() {
		defer close(r.profileDone)
		var wg sync.WaitGroup
		var gerr error
		wg.Go(func() {
			// Where the broker's goroutines wait, halfway through the window,
			// and what its heap held at the last collection before then
			// (without gc=1, which would collect and so stall the window).
			if gerr = sleepCtx(ctx, r.e.duration/2); gerr == nil {
				gerr = errors.Join(
					fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=1", r.pprofAddr), base+"-goroutines.txt"),
					fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/heap", r.pprofAddr), base+"-heap.pprof"))
			}
		})
		r.profileErr = fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", r.pprofAddr, secs), r.profilePath)
		wg.Wait()
		r.profileErr = errors.Join(r.profileErr, gerr)
	}()
}

func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// stop ends both processes; safe after a failed start.
func (r *timerRun) stop() {
	r.stopOnce.Do(func() {
		if r.cancelWatch != nil {
			r.cancelWatch(context.Canceled)
		}
		for _, p := range []*process{r.handler, r.broker} {
			if err := p.stop(); err != nil {
				r.e.progressf("%v", err)
			}
		}
	})
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// scrapeWrites reads the API server's write requests so far, by resource
// ("widgets.test.tether.dev", "leases.coordination.k8s.io", "events").
func scrapeWrites(ctx context.Context, kube kubernetes.Interface) (map[string]float64, error) {
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's /metrics: %w", err)
	}
	w := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		labels, value, ok := parseSample(sc.Text(), "apiserver_request_total")
		if !ok || !isWrite(labels["verb"]) {
			continue
		}
		key := labels["resource"]
		if g := labels["group"]; g != "" {
			key += "." + g
		}
		if s := labels["subresource"]; s != "" {
			key += "/" + s
		}
		w[key] += value
	}
	return w, sc.Err()
}

// writesIn splits the writes between two scrapes into those on Widgets and
// Events (what ticks could cause) and the others, by resource.
func writesIn(before, after map[string]float64) (float64, map[string]float64) {
	widgets := controlplane.WidgetGVR.Resource + "." + controlplane.WidgetGVR.Group
	var ours float64
	other := map[string]float64{}
	for k, v := range after {
		d := v - before[k]
		if d == 0 {
			continue
		}
		res, _, _ := strings.Cut(k, "/")
		switch {
		case res == widgets, res == "events", res == "events.events.k8s.io":
			ours += d
		default:
			other[k] += d
		}
	}
	return ours, other
}

// reportTimers writes the table and the verdicts; it reports whether every
// 1 s row met the goal.
func reportTimers(w io.Writer, cfg *config, rows []timerRow) bool {
	hold := "held (tether.dev/" + timerHandlerName + ")"
	if cfg.noHold {
		hold = "not held (FinalizerNone)"
	}
	created := "created before the first broker started; later runs find them held, as a restarted broker does"
	if cfg.noHold {
		created = "created before the first broker started"
	}
	if cfg.spread {
		created = "created after each run's handler connected (-spread: first ticks spread over the creation)"
	}
	workers := "64 (default)"
	if cfg.workers > 0 {
		workers = strconv.Itoa(cfg.workers)
	}
	fmt.Fprintf(w, "Tether timer benchmark: kube-apiserver %s, %d CPUs, %s, broker QPS %g burst %d workers %s, %s, handler window %d, Widgets %s, %s\n",
		controlplane.KubernetesVersion, runtime.NumCPU(), runtime.Version(), cfg.qps, cfg.burst, workers, timerHandlerDesc(cfg), cfg.window, hold, created)
	fmt.Fprintf(w, "plain: the next tick is due one interval after the broker received the ack (a tick the broker sent late: up to that lateness more, the slip in the notes); sharp: on a fixed grid. expected: the ticks due in the window by the timer's own schedule; "+
		"delivered: those that arrived (some during the %s drain after the window); grid %%: ticks that arrived in the window / (objects x window / interval).\n", timerDrain)
	fmt.Fprintf(w, "The machine may be shared: the load average (1, 5, 15 min) at the start and end of each window and the CPU time stolen by the hypervisor in it are in the notes.\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tinterval\tobjects\twindow s\texpected\tdelivered\tdelivered %\tgrid %\tp50 ms\tp99 ms\tmax ms\tperiod ms\tbroker cores\tbroker peak RSS MiB\thandler cores\tAPI writes")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%d\t%d\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f\t%.2f\t%.0f\n",
			r.mode, r.interval, r.objects, r.window.Seconds(), r.summary.Expected, r.summary.Delivered, 100*r.deliveredShare(), 100*r.gridShare(),
			r.summary.P50Ms, r.summary.P99Ms, r.summary.MaxMs, r.summary.MeanPeriodMs,
			r.broker, r.brokerRSS, r.handler, r.writes)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rows {
		api := "?"
		if r.apiserver >= 0 {
			api = fmt.Sprintf("%.2f", r.apiserver)
		}
		start := "objects new"
		if r.held {
			start = "objects held already"
		}
		slip := ""
		if r.mode == modePlain {
			slip = fmt.Sprintf("; next tick due after ack + interval + p50 %.1fms p99 %.1fms", r.summary.SlipP50Ms, r.summary.SlipP99Ms)
		}
		fmt.Fprintf(w, "%s %s N=%d: warm-up %.1fs (%s); %d missed; %d/%d objects ticked in the window (%d to %d ticks each); lateness mean %.1fms p90 %.1fms p99.9 %.1fms%s; handler peak RSS %.1f MiB; kube-apiserver %s cores; load average %s at the start, %s at the end; CPU steal %s; other writes: %s",
			r.mode, r.interval, r.objects, r.warmup.Seconds(), start, r.summary.Missed, r.summary.Objects, r.objects, r.summary.MinPerObject, r.summary.MaxPerObject,
			r.summary.MeanMs, r.summary.P90Ms, r.summary.P999Ms, slip, r.hdRSS, api, r.load, r.loadEnd, r.steal, otherWrites(r.other))
		if r.profile != "" {
			fmt.Fprintf(w, "; CPU profile %s", r.profile)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	ok := true
	judged := false
	for _, r := range rows {
		if r.interval != goalInterval {
			continue
		}
		judged = true
		d, p, c, nw := r.meets()
		pass := d && p && c && nw
		ok = ok && pass
		fmt.Fprintf(w, "%s %s N=%d: delivered %.2f%% (goal >= %.1f%%): %s; p99 lateness %.1fms (goal < %dms): %s; broker %.2f cores (goal < %.0f): %s; API writes %.0f (goal 0): %s => %s\n",
			r.mode, r.interval, r.objects, 100*r.deliveredShare(), 100*goalDelivered, passFail(d),
			r.summary.P99Ms, goalP99.Milliseconds(), passFail(p), r.broker, goalCores, passFail(c),
			r.writes, passFail(nw), passFail(pass))
	}
	if !judged {
		fmt.Fprintf(w, "no %s run: no verdict (the goal is for %s timers)\n", goalInterval, goalInterval)
	}
	return ok
}

func otherWrites(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}
