package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/pyinterp"
)

// The namespaces of a run, and the handler's name.
const (
	loadNamespace   = "chaos"
	brokerNamespace = "tether-system"
	handlerName     = "chaos"
	loadUser        = "chaos-load"
)

// Options configure a run. The zero value runs seed 0 for ten minutes.
type Options struct {
	Seed int64
	// Duration is how long the load runs and faults are injected
	// (default 10 minutes).
	Duration time.Duration
	// Grace is the handler's grace (default 5 s); Bound is how long after
	// the load stops (and a grace) everything must have settled (default
	// 30 s).
	Grace, Bound time.Duration
	// Rate is the load's writes per second (default 10).
	Rate int
	// Dir keeps the processes' logs (default: a new temporary folder).
	Dir string
	// Progress receives a line per step and fault; nil: none.
	Progress io.Writer
	// BrokerFlags are added to every broker's flags.
	BrokerFlags []string
	// Break builds the broker with -tags chaosbreak and has it break the
	// contract in this way (see broker/dispatch/breakage.go), to show that
	// the checker catches it.
	Break string
	// Race builds the broker with the race detector.
	Race bool
}

func (o *Options) setDefaults() error {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Minute
	}
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	if o.Bound <= 0 {
		o.Bound = 30 * time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 10
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "tether-chaos-")
		if err != nil {
			return fmt.Errorf("making the run's folder: %w", err)
		}
		o.Dir = d
	}
	return os.MkdirAll(o.Dir, 0o755)
}

// run is one chaos run: the real processes, the links between them, and
// what they reported.
type run struct {
	opts  Options
	cp    *controlplane.ControlPlane
	dyn   dynamic.Interface
	links *links

	brokers      map[string]*proc
	brokerNames  []string
	metricsAddrs map[string]string
	// admissionAddrs are the brokers' admission ports, behind the front.
	admissionAddrs map[string]string
	front          *front
	handlers       map[string]*proc
	handlerNames   []string
	// handlerBrokers are the handlers' --brokers: the links to each broker.
	handlerBrokers string
	variant        int

	mu         sync.Mutex
	deliveries []Delivery
	samples    map[string][]sample // by broker
}

// Run plays one seed against a control plane, two broker replicas and
// three handler instances it starts, and returns the history for Check.
// The processes are stopped before it returns; their logs stay in
// opts.Dir.
func Run(ctx context.Context, opts Options) (*History, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	r := &run{opts: opts, links: newLinks(), brokers: map[string]*proc{}, metricsAddrs: map[string]string{}, admissionAddrs: map[string]string{},
		handlers: map[string]*proc{}, variant: 1, samples: map[string][]sample{}}
	defer r.links.stop()
	r.progress("logs in %s", opts.Dir)
	bins, err := r.build(ctx)
	if err != nil {
		return nil, err
	}
	r.cp, err = controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(opts.Dir, "controlplane"), Progress: opts.Progress,
		EtcdVia: func(etcd string) (string, error) { return r.links.add(etcdLink, etcd) }})
	if err != nil {
		return nil, err
	}
	defer r.cp.Stop()
	dyn, err := dynamic.NewForConfig(r.cp.RESTConfig())
	if err != nil {
		return nil, fmt.Errorf("making a client: %w", err)
	}
	r.dyn = dyn
	if err := r.prepare(ctx, dyn); err != nil {
		return nil, err
	}
	if r.front, err = newFront(r.leaderAdmission); err != nil {
		return nil, err
	}
	if err := r.startBrokers(ctx, bins.broker); err != nil {
		return nil, err
	}
	defer r.stopAll()
	frontCtx, stopFront := context.WithCancel(ctx)
	var frontDone sync.WaitGroup
	frontDone.Go(func() { r.front.start(frontCtx) })
	defer func() {
		stopFront()
		frontDone.Wait()
	}()
	var w watcher
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := w.start(watchCtx, dyn, loadNamespace); err != nil {
		return nil, err
	}
	r.startHandlers(bins)
	if err := r.awaitHolding(ctx, dyn); err != nil {
		return nil, err
	}
	r.sampleBrokers(ctx)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { r.sampleUntilDone(sampleCtx) })
	defer func() {
		stopSampling()
		sampling.Wait()
	}()

	h := &History{Seed: opts.Seed, Grace: opts.Grace, Bound: opts.Bound, Handler: handlerName}
	// The load writes as a user of its own: the brokers' own requests skip
	// the webhooks, and the load's must be reviewed.
	cfg := r.cp.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: loadUser, Groups: []string{"system:masters"}}
	var warnings warningCount
	cfg.WarningHandler = &warnings
	loadDyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the load's client: %w", err)
	}
	l := newLoad(loadDyn, loadNamespace, opts.Seed, opts.Rate)
	h.Start = time.Now()
	r.progress("load and faults for %v (seed %d)", opts.Duration, opts.Seed)
	loadCtx, stopLoad := context.WithDeadline(ctx, h.Start.Add(opts.Duration))
	defer stopLoad()
	var loadDone sync.WaitGroup
	loadDone.Go(func() { l.run(loadCtx) })
	h.Faults = r.play(loadCtx, h.Start)
	loadDone.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	settle, cancel := context.WithTimeout(ctx, opts.Bound)
	l.removeAllForeign(settle)
	l.deleteAll(settle)
	cancel()
	h.Quiet = time.Now()
	r.progress("quiet: waiting up to %v for every object to go", opts.Grace+opts.Bound)
	r.awaitEmpty(ctx, dyn, h.Quiet.Add(opts.Grace+opts.Bound))
	stopSampling()
	sampling.Wait()
	r.sampleBrokers(ctx)
	if h.Final, err = finalState(ctx, dyn, loadNamespace); err != nil {
		return nil, err
	}
	if h.Events, err = events(ctx, r.cp.Client(), loadNamespace); err != nil {
		return nil, err
	}
	h.End = time.Now()
	stopWatch()
	r.stopAll()
	h.Ops = l.history()
	h.Warnings = warnings.n.Load()
	h.Observations = w.history()
	r.mu.Lock()
	h.Deliveries = slices.Clone(r.deliveries)
	r.mu.Unlock()
	h.Brokers = r.brokerReports()
	return h, nil
}

// warningCount counts the warnings the API server sent the load, instead
// of printing them: a review that failed open comes with one.
type warningCount struct{ n atomic.Int64 }

func (w *warningCount) HandleWarningHeader(_ int, _ string, _ string) { w.n.Add(1) }

func (r *run) progress(format string, args ...any) {
	fmt.Fprintf(r.opts.Progress, "chaos: "+format+"\n", args...)
}

// binaries are what the run starts: the broker and the Go handler built
// into the run's folder, and the Python handler's script (empty when
// Python cannot run it here).
type binaries struct{ broker, handler, pyHandler string }

// build compiles the broker and the chaos handler into the run's folder.
func (r *run) build(ctx context.Context) (binaries, error) {
	root, err := controlplane.FindRepoRoot(".")
	if err != nil {
		return binaries{}, err
	}
	dir := filepath.Join(r.opts.Dir, "bin")
	b := binaries{broker: filepath.Join(dir, "broker"), handler: filepath.Join(dir, "chaoshandler")}
	if why := pyinterp.PythonMissing(); why != "" {
		r.progress("no Python handler instance in this run: %s", why)
	} else {
		b.pyHandler = filepath.Join(root, "test", "chaos", "chaoshandler", "handler.py")
	}
	brokerArgs := []string{"build", "-o", b.broker}
	if r.opts.Race {
		brokerArgs = append(brokerArgs, "-race")
	}
	if r.opts.Break != "" {
		brokerArgs = append(brokerArgs, "-tags", "chaosbreak")
	}
	for _, args := range [][]string{
		append(brokerArgs, "./cmd/broker"),
		{"build", "-o", b.handler, "./test/chaos/chaoshandler"},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return binaries{}, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return b, nil
}

// prepare installs the Widget CRD and the run's namespaces.
func (r *run) prepare(ctx context.Context, dyn dynamic.Interface) error {
	if err := controlplane.InstallWidgetCRD(ctx, dyn, 30*time.Second); err != nil {
		return err
	}
	for _, ns := range []string{loadNamespace, brokerNamespace} {
		if _, err := r.cp.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the namespace %s: %w", ns, err)
		}
	}
	return nil
}

// play injects the faults of the seed's plan, each at its time (or as soon
// as the one before is healed), until ctx ends.
func (r *run) play(ctx context.Context, start time.Time) []Fault {
	// The API server's link to etcd is the etcd-compact fault's to cut.
	links := slices.DeleteFunc(r.links.names(), func(n string) bool { return n == etcdLink })
	slices.Sort(links)
	plan := Plan(r.opts.Seed, r.opts.Duration, r.opts.Grace, Topology{Handlers: r.handlerNames, Links: links})
	var faults []Fault
	for _, p := range plan {
		wait(ctx, time.Until(start.Add(p.After)))
		if ctx.Err() != nil {
			break
		}
		// Healed whatever the load's deadline: a restart under way must
		// finish.
		f, err := r.inject(context.WithoutCancel(ctx), p)
		if err != nil {
			f.Detail = strings.TrimSpace(f.Detail + " " + err.Error())
			r.progress("%s: %v", p, err)
		} else {
			r.progress("%s", p)
		}
		faults = append(faults, f)
	}
	return faults
}

// onDelivery collects a handler instance's delivery lines.
func (r *run) onDelivery(_ int, line string) {
	var d Delivery
	if err := json.Unmarshal([]byte(line), &d); err != nil {
		return // not a delivery line
	}
	r.mu.Lock()
	r.deliveries = append(r.deliveries, d)
	r.mu.Unlock()
}

// awaitEmpty waits until the load's namespace has none of its objects
// left, or deadline.
func (r *run) awaitEmpty(ctx context.Context, dyn dynamic.Interface, deadline time.Time) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if objs, err := finalState(ctx, dyn, loadNamespace); err == nil && len(objs) == 0 {
			return
		}
		wait(ctx, 500*time.Millisecond)
	}
}
