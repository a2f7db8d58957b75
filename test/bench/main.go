// Command bench is the create/delete benchmark of the Tether broker
// (issues 3 and 38). It starts its own etcd and kube-apiserver, installs the
// Widget CRD and, for each object count N and each workload (-workloads),
// runs these scenarios against that API server, each in its own namespace
// and in turns within every round:
//
//   - broker: cmd/broker and a bench handler as real processes talking
//     gRPC, with the Go SDK (test/bench/handler) or the Python SDK
//     (test/bench/handler/handler.py), as -handler says. The handler has a
//     create binding that does the workload (result: stores a small result;
//     label: patches a label; status: patches status) and a delete binding,
//     so every object is also held with the finalizer tether.dev/bench.
//   - raw: the limit a perfect operator reaches, a client-go controller
//     (test/bench/raw) in a process of its own (test/bench/rawcontroller)
//     that makes the same API writes: one guarded JSON patch per object on
//     create (finalizer, and the result annotation or the label; for
//     status the finalizer, then a status write) and one on delete
//     (finalizer removed), with the same client QPS and burst as the broker.
//
// The bench process creates N Widgets with its own fast client, measures
// until every one is handled, then deletes them all and measures until
// every one is gone. For each phase it prints the time, objects per second,
// the controller's API writes per object by verb (from the API server's
// /metrics, the bench client's own requests taken out), Event writes per
// object, the controller's CPU time per object, the peak RSS and private
// memory of its processes, and the machine's CPU steal and load average;
// then it compares each broker case with raw on the same workload, round by
// round, and judges the medians against the goals (report.go).
//
//	go run ./test/bench -n 2000 -workloads result,label,status -handler go,python -out bench.txt
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/bench/workload"
	"github.com/tether-dev/tether/test/controlplane"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitGoalMiss = 3
)

type config struct {
	counts []int
	pairs  int
	// slices is -slices: the phases of a round's cases of one workload
	// done in that many slices, the cases in turns (slices.go); 1: each
	// case alone.
	slices     int
	qps        float64
	burst      int
	window     int
	rawWorkers int
	timeout    time.Duration
	out        string
	keep       bool
	// workloads and handlers are -workloads and -handler: the cases of
	// every round (cases.go).
	workloads []string
	handlers  []string
	// baseline is -baseline: the source tree of the baseline cases'
	// broker (and of python-baseline's SDK).
	baseline string

	// scale is -scale (scale.go): both benchmarks and one table.
	scale bool
	// brokerOnly is -broker-only: no raw scenario.
	brokerOnly bool
	// windowSet: -window was given.
	windowSet bool

	// The timer benchmark (-timers); see timers.go.
	timers    bool
	objects   []int
	intervals []time.Duration
	duration  time.Duration
	modes     []string
	noHold    bool
	spread    bool
	workers   int
	profile   string
	// timerHandler is -timer-handler: go, python, python-sync or typescript
	// (see timerhandlers.go); python the interpreter of the Python handler.
	timerHandler  string
	python        string
	pythonVersion string // filled in by checkPython, for the report
	nodeVersion   string // filled in by checkTypeScript, for the report

	// The label-pushdown benchmark (-pushdown); see pushdown.go.
	pushdown bool
	labelled float64

	// The failover benchmark (-failover); see failover.go.
	failover       bool
	ways           []string
	standbys       []string
	leaseDuration  time.Duration
	handlerBackoff time.Duration
	reviewRate     int
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: go run ./test/bench [flags]
       go run ./test/bench -timers [-objects 10000] [-intervals 1s,10s] [-modes plain,sharp] [-duration 60s] [flags]
       go run ./test/bench -pushdown [-n 10000] [-labelled 1] [-pairs 3] [flags]

The create/delete benchmark: the Tether broker with a handler process (Go or
Python, -handler) against a raw client-go controller making the same API
writes, for each of -workloads, on a control plane of its own. Progress goes to
stderr, the table to stdout (and -out). Exit status: 0 when every goal is met
(result workload: the Go handler >= 95% of raw's objects/s on create and on
delete and <= 1.2x its CPU per object, Python >= 85% and <= 2x; every
workload: raw's writes per object on create), 3 when one is missed, 1 when the
run fails, 2 for bad flags.

With -timers, the timer benchmark instead: for each object count and interval,
that many Widgets with a timer each, handled by an ack-only handler process
(test/bench/timerhandler, or with -timer-handler python or typescript its twin
on the Python or TypeScript SDK, handler.py or handler.js beside it), measured for -duration after every object had its
first tick: ticks delivered against expected, lateness p50/p99/max, broker and
handler CPU, broker peak RSS, API writes. Ticks are counted by due time, as
each timer's own schedule makes them due. Goal for every 1s row (plain and
sharp): >= 99.9% of the ticks delivered, p99 lateness < 100ms, the broker
under one core, no API writes.

Flags:
`)
		fs.PrintDefaults()
	}
	counts := fs.String("n", "1000,5000", "comma-separated object `counts`; each runs both scenarios")
	fs.IntVar(&c.slices, "slices", 1, "with more than 1, the cases of a workload run together: every controller started, each phase done in this many slices\n"+
		"of N/slices objects, the cases taking turns at each (forward, then backward), so that the machine's drift over a round falls alike on all (create/delete benchmark only)")
	fs.IntVar(&c.pairs, "pairs", 3, "rounds of each N: broker and raw run one after the other, in turns (broker first in odd rounds, raw first in even ones);\nthe verdict is on the median of the rounds' shares")
	fs.Float64Var(&c.qps, "qps", 100, "writes per second of the broker (--kube-api-qps) and client QPS of the raw controller")
	fs.IntVar(&c.burst, "burst", 200, "burst of the broker (--kube-api-burst) and of the raw controller's client")
	fs.IntVar(&c.window, "window", 64, "deliveries the bench handler runs at once (its window); with -timers 256 unless given")
	fs.IntVar(&c.rawWorkers, "raw-workers", 64, "workers of the raw controller (the broker runs 64 per handler, bounded by -window)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "how long one phase (create or delete of N objects; with -timers, the warm-up) may take before the run fails")
	workloads := fs.String("workloads", workload.Result, "comma-separated `workloads` of the create binding, each against raw doing the same writes:\n"+
		"result (a small result stored by the broker), label (a label patched), status (status patched through /status)")
	fs.StringVar(&c.baseline, "baseline", "", "a source `tree` of Tether at another commit (git worktree add DIR REV): its broker runs the handler cases "+handlerGoBaseline+"\n(the Go handler) and, with -handler python, "+handlerPythonBaseline+" (the tree's handler.py and Python SDK), in turns with the others,\nso that two commits compare in one run (adds them to -handler; "+handlerGoBaseline+" when -handler has neither go nor python)")
	handlers := fs.String("handler", handlerGo, "comma-separated `handlers` of the broker: go (test/bench/handler), python ("+benchHandlerPy+", run by -python)\n"+
		"or go-traced (go with tracing on in broker and handler, every span sent to a Jaeger the bench starts; no goal, its cost is measured)\n"+
		"or "+handlerGoBaseline+" and "+handlerPythonBaseline+" (go and python under the broker of -baseline; no goal)")
	fs.StringVar(&c.out, "out", "", "also write the table to this `file`")
	fs.BoolVar(&c.keep, "keep", false, "keep the work folder (binaries, broker, handler and raw controller logs) after a successful run; a failed run always keeps it")
	fs.BoolVar(&c.brokerOnly, "broker-only", false, "run the broker scenario only: its memory and CPU at a count where a raw round takes too long; no comparison, so no verdict")
	fs.BoolVar(&c.timers, "timers", false, "run the timer benchmark instead of create/delete (flags marked -timers: are its own)")
	fs.BoolVar(&c.scale, "scale", false, "make bench-scale: the create/delete benchmark at each -n (default "+scaleCounts+"; counts above 10000 one round),\nthen 100000 Widgets with a 10s timer for -duration, and one table of both")
	objects := fs.String("objects", "10000", "-timers: comma-separated object `counts`, each with a timer")
	intervals := fs.String("intervals", "1s,10s", "-timers: comma-separated timer `intervals`; each count runs at each interval")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "-timers: length of the measurement window, after the warm-up")
	modes := fs.String("modes", "plain,sharp", "-timers: comma-separated timer `modes`, each run at every count and interval: plain (the next tick one interval after each ack)\nor sharp (sdk.Sharp: ticks on a fixed grid)")
	fs.BoolVar(&c.noHold, "no-hold", false, "-timers: sdk.Finalizer(FinalizerNone): no hold, so no write per object at the start")
	fs.BoolVar(&c.spread, "spread", false, "-timers: create the Widgets after the handler connected, so their first ticks spread over the creation time (default: before the broker starts, as after a broker restart: all first ticks at once)")
	fs.IntVar(&c.workers, "workers", 0, "-timers: the broker's --workers (0: its default, 64)")
	fs.StringVar(&c.timerHandler, "timer-handler", timerHandlerGo, "-timers: the handler process: go (test/bench/timerhandler, Go SDK), python (test/bench/timerhandler/handler.py, Python SDK,\nan async function), python-sync (the same with a plain function, run in the SDK's thread pool) or typescript\n(test/bench/timerhandler/handler.js, TypeScript SDK built with npm, an async function); every one only acks")
	fs.StringVar(&c.python, "python", defaultPython, "the `interpreter` of the Python handlers (-handler python, -timer-handler python); it must import grpc and google.protobuf (Debian: python3-grpcio, python3-protobuf)")
	fs.BoolVar(&c.failover, "failover", false, "run the failover benchmark instead: at each -n (default "+failoverCounts+"), two broker replicas with --leader-elect and the bench handler;\n"+
		"-pairs times each of -ways the leader is stopped while a Widget is created, and the table says when the other replica led, was ready,\n"+
		"had the handler back and handled that Widget (goal: under "+failoverGoal.String()+", no hold lost)")
	fs.BoolVar(&c.pushdown, "pushdown", false, "run the label-pushdown benchmark instead: at each -n (default "+pushdownCounts+") Widgets, -labelled percent of them "+hotLabel+"\n"+
		"and the bench handler binding "+hotLabel+", the broker with and without --no-label-pushdown in turns, -pairs times: Widgets cached, their bytes, peak RSS")
	fs.Float64Var(&c.labelled, "labelled", 1, "-pushdown: the `percent` of the Widgets labelled "+hotLabel)
	ways := fs.String("ways", stopTerm+","+stopKill, "-failover: comma-separated ways to stop the leader: term (SIGTERM, as a deleted Pod: the Lease is released) or kill (SIGKILL, as a crash: the follower sees the leader's process gone)")
	standbys := fs.String("standby", standbyWarm+","+standbyCold, "-failover: comma-separated follower caches to compare, in turns: warm (the default: followers keep the caches warm)\nor cold (--leader-elect-cold-standby)")
	fs.DurationVar(&c.leaseDuration, "lease-duration", 0, "-failover: the brokers' --leader-elect-lease-duration (0: their default)")
	fs.DurationVar(&c.handlerBackoff, "handler-backoff-max", sdk.DefaultReconnectMax, "-failover: the handler's longest wait between two connection attempts (the SDK's default)")
	fs.IntVar(&c.reviewRate, "reviews", 20, "-failover: Widget creates a second through the API server, each reviewed by the handler's fail-open mutate binding\non every replica, from before each stop until the new Widget is handled; counted as answered, failed open or refused (0: none)")
	fs.StringVar(&c.profile, "profile", "", "run a broker built with net/http/pprof and save in this `dir` a heap profile of the broker after each phase\nand CPU profiles of the broker and the handler over their run (the Python handler's: cProfile of its event loop's thread, a .pstats file; with -timers: a heap profile halfway through each warm-up, a CPU profile of each measurement window, and a goroutine dump and the heap of the last collection from its middle)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.profile != "" {
		abs, err := filepath.Abs(c.profile)
		if err != nil {
			return nil, err
		}
		c.profile = abs
	}
	nSet, casesSet := false, false
	fs.Visit(func(f *flag.Flag) {
		c.windowSet = c.windowSet || f.Name == "window"
		nSet = nSet || f.Name == "n"
		casesSet = casesSet || f.Name == "workloads" || f.Name == "handler"
	})
	if casesSet && (c.timers || c.scale || c.pushdown || c.failover) {
		return nil, errors.New("-workloads and -handler are for the create/delete benchmark alone, not -timers, -scale, -pushdown or -failover")
	}
	if c.slices > 1 && (c.timers || c.scale || c.pushdown || c.failover) {
		return nil, errors.New("-slices is for the create/delete benchmark alone, not -timers, -scale, -pushdown or -failover")
	}
	var err error
	if c.workloads, err = parseList("workloads", *workloads, workload.Check); err != nil {
		return nil, err
	}
	if c.handlers, err = parseList("handler", *handlers, checkHandler); err != nil {
		return nil, err
	}
	if err := c.checkBaseline(); err != nil {
		return nil, err
	}
	if c.timers && c.scale {
		return nil, errors.New("-timers and -scale do not go together: -scale runs the timers it needs")
	}
	if c.scale && !nSet {
		*counts = scaleCounts
	}
	if c.pushdown {
		if c.timers || c.scale || c.failover {
			return nil, errors.New("-pushdown goes with none of -timers, -scale and -failover")
		}
		if c.labelled <= 0 || c.labelled > 100 {
			return nil, fmt.Errorf("-labelled: %v is not a percent above 0", c.labelled)
		}
		if !nSet {
			*counts = pushdownCounts
		}
	}
	if c.failover {
		if c.timers || c.scale {
			return nil, errors.New("-failover goes with neither -timers nor -scale")
		}
		if !nSet {
			*counts = failoverCounts
		}
		if err := c.parseFailover(*ways, *standbys); err != nil {
			return nil, err
		}
	}
	if c.timers {
		if err := c.parseTimers(*objects, *intervals, *modes, c.windowSet); err != nil {
			return nil, err
		}
	}
	for f := range strings.SplitSeq(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-n: %q is not a positive count", f)
		}
		c.counts = append(c.counts, n)
	}
	if c.qps <= 0 || c.burst <= 0 || c.window <= 0 || c.rawWorkers <= 0 || c.timeout <= 0 || c.pairs <= 0 || c.slices <= 0 {
		return nil, errors.New("-qps, -burst, -window, -raw-workers, -timeout, -pairs and -slices must be positive")
	}
	for _, n := range c.counts {
		if c.slices > n {
			return nil, fmt.Errorf("-slices %d: more than the %d objects of -n", c.slices, n)
		}
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitUsage
	}
	// client-go's own logs (e.g. cancelled requests while stopping) would
	// only clutter the progress lines.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-sigCtx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	var sb strings.Builder
	var ok bool
	switch {
	case cfg.scale:
		rows, tcfg, trows, err := benchScale(sigCtx, cfg, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		report(&sb, cfg, rows)
		fmt.Fprintln(&sb)
		reportTimers(&sb, tcfg, trows)
		fmt.Fprintln(&sb)
		ok = reportScale(&sb, cfg, rows, trows)
	case cfg.pushdown:
		rows, err := benchPushdown(sigCtx, cfg, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		ok = reportPushdown(&sb, cfg, rows)
	case cfg.failover:
		rows, err := benchFailover(sigCtx, cfg, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		ok = reportFailover(&sb, cfg, rows)
	case cfg.timers:
		rows, err := benchTimers(sigCtx, cfg, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		ok = reportTimers(&sb, cfg, rows)
	default:
		rows, err := bench(sigCtx, cfg, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		ok = report(&sb, cfg, rows)
	}
	fmt.Fprint(stdout, sb.String())
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(sb.String()), 0o644); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
	}
	if !ok {
		return exitGoalMiss
	}
	return exitOK
}

// env is what every scenario shares.
type env struct {
	*config
	sig    context.Context // ends on Ctrl-C
	stderr io.Writer
	repo   string // repository root, to build the binaries in
	work   string // temporary folder: binaries and process logs
	cp     *controlplane.ControlPlane
	admin  *rest.Config
	kube   kubernetes.Interface
	dyn    dynamic.Interface    // admin client for probes and trackers
	load   dynamic.Interface    // the bench's own fast client: creates and deletes
	jaeger *controlplane.Jaeger // receives the spans of -handler go-traced; nil without it
}

func (e *env) progressf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "bench: "+format+"\n", args...)
}

func (e *env) interrupted() bool { return e.sig.Err() != nil }

// bench starts the control plane, runs every scenario and stops everything.
func bench(ctx context.Context, cfg *config, stderr io.Writer) (rows []row, err error) {
	if slices.Contains(cfg.handlers, handlerPython) || slices.Contains(cfg.handlers, handlerPythonBaseline) {
		if cfg.pythonVersion, err = checkPython(ctx, cfg.python); err != nil {
			return nil, err
		}
	}
	err = withEnv(ctx, cfg, stderr, "./test/bench/handler", func(e *env, bin binaries) error {
		if cfg.profile != "" {
			if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
				return err
			}
			if bin.broker, err = buildProfilingBroker(ctx, e); err != nil {
				return err
			}
		}
		for _, n := range cfg.counts {
			for round := 1; round <= cfg.rounds(n); round++ {
				cases := roundCases(cfg.workloads, cfg.handlers, cfg.brokerOnly, round)
				for _, group := range caseGroups(cases, cfg.slices > 1) {
					cons := make([]controller, len(group))
					ids := make([]string, len(group))
					for i, cs := range group {
						cons[i] = newRawController(e, bin, cs.workload)
						if cs.scenario == scenarioBroker {
							cons[i] = newBrokerController(e, bin, cs.handler, cs.workload)
						}
						ids[i] = cs.id()
					}
					name := strings.Join(ids, ", ")
					e.progressf("%s N=%d round %d/%d: starting", name, n, round, cfg.rounds(n))
					rs, err := runGroup(ctx, e, group, cons, n, round, cfg.slices)
					if err != nil {
						return fmt.Errorf("%s N=%d round %d: %w", name, n, round, err)
					}
					rows = append(rows, rs...)
				}
			}
		}
		return nil
	})
	return rows, err
}

// withEnv builds the broker and the handler package handlerPkg, starts the
// control plane, makes the clients, installs the Widget CRD and calls body;
// then it stops everything. The work folder is kept when body fails.
func withEnv(ctx context.Context, cfg *config, stderr io.Writer, handlerPkg string, body func(*env, binaries) error) (err error) {
	e := &env{config: cfg, sig: ctx, stderr: stderr}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	if e.repo, err = controlplane.FindRepoRoot(wd); err != nil {
		return err
	}
	if e.work, err = os.MkdirTemp("", "tether-bench-"); err != nil {
		return err
	}
	defer func() {
		if err != nil || cfg.keep {
			fmt.Fprintf(stderr, "bench: logs kept in %s\n", e.work)
			return
		}
		os.RemoveAll(e.work)
	}()

	bin, err := buildBinaries(ctx, e, handlerPkg)
	if err != nil {
		return err
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: stderr})
	e.progressf("finding or building etcd and kube-apiserver")
	bins, err := controlplane.Ensure(ctx, controlplane.EnsureOptions{Progress: stderr, Log: log.Named("ensure")})
	if err != nil {
		return err
	}
	e.progressf("starting the control plane")
	cp, err := controlplane.Start(ctx, controlplane.Options{Binaries: bins, Log: log.Named("controlplane"), Progress: stderr})
	if err != nil {
		return err
	}
	e.cp = cp
	defer func() {
		if serr := cp.Stop(); serr != nil {
			e.progressf("stopping the control plane: %v", serr)
		}
	}()
	e.progressf("control plane up in %s at %s", cp.StartDuration().Round(time.Millisecond), cp.URL())
	e.admin = cp.RESTConfig()
	e.kube = cp.Client()
	if e.dyn, err = dynamic.NewForConfig(e.admin); err != nil {
		return err
	}
	loadCfg := cp.RESTConfig()
	loadCfg.QPS, loadCfg.Burst = 2000, 2000
	loadCfg.UserAgent = "tether-bench-load"
	ownConnection(loadCfg)
	if e.load, err = dynamic.NewForConfig(loadCfg); err != nil {
		return err
	}
	if err := controlplane.InstallWidgetCRD(ctx, e.dyn, time.Minute); err != nil {
		return err
	}
	if slices.Contains(cfg.handlers, handlerGoTraced) {
		e.progressf("starting jaeger for the spans of %s (built once and cached)", handlerGoTraced)
		if e.jaeger, err = controlplane.StartJaeger(ctx, controlplane.JaegerOptions{Dir: e.work, Progress: stderr}); err != nil {
			return err
		}
		defer func() {
			if serr := e.jaeger.Stop(); serr != nil {
				e.progressf("stopping jaeger: %v", serr)
			}
		}()
	}
	return body(e, bin)
}

// ownConnection gives the clients made from cfg their own connection to
// the API server. client-go otherwise shares one HTTP/2 connection between
// every client of the process with the same TLS settings, and the raw
// controller would queue behind the bench's own load.
func ownConnection(cfg *rest.Config) {
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
}
