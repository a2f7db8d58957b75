package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/dispatch"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// The failover benchmark (-failover): N Widgets held by the bench handler
// under two broker replicas with --leader-elect, and then, in turns, the
// leader stopped one way or the other while a new Widget is created. It
// measures, from the stop, when the other replica leads, when it is ready,
// when the handler is connected to it and when the new Widget is handled:
// the time the handler's objects go unserved.

// failoverGoal bounds the time from the leader's stop to the first
// delivery of the new leader (issue 16).
const failoverGoal = 10 * time.Second

// failoverCounts is -n for -failover unless given.
const failoverCounts = "10000"

// Ways to stop the leader.
const (
	// stopTerm is SIGTERM, as when its Pod is deleted (a rollout, a node
	// drain): it releases the Lease on its way out.
	stopTerm = "term"
	// stopKill is SIGKILL, as when its process is OOM-killed or crashes:
	// the follower finds the leader's liveness address refusing
	// connections and takes over without waiting for the Lease to expire.
	stopKill = "kill"
)

// The log lines of cmd/broker that mark the steps of a takeover, as the
// broker's text log writes them.
const (
	logLeading   = "leading: this replica watches"
	logReady     = "broker ready:"
	logConnected = "handler instance connected"
	logFollowing = "following:"
	logWarm      = "caches warm for a takeover"
	logLiveness  = "the leader's liveness address answers"
)

// Follower caches (-standby).
const (
	standbyWarm = "warm" // the default: followers keep the caches warm
	standbyCold = "cold" // --leader-elect-cold-standby
)

type failoverRow struct {
	n       int
	round   int
	standby string
	way     string
	// From the stop of the leader: the other replica leads, is ready,
	// has the handler connected, and the new Widget is handled.
	leading, ready, connected, handled time.Duration
	// writes are the brokers' writes on Widgets from the stop until they
	// settled, the new Widget's included.
	writes float64
	// lost counts the Widgets without the handler's hold afterwards.
	lost int
	// reviews are the review load's creates (-reviews) from the stop until
	// the new Widget was handled.
	reviews reviewCounts
}

func (c *config) parseFailover(ways, standbys string) error {
	for m := range strings.SplitSeq(standbys, ",") {
		m = strings.TrimSpace(m)
		if m != standbyWarm && m != standbyCold {
			return fmt.Errorf("-standby: %q is neither %s nor %s", m, standbyWarm, standbyCold)
		}
		c.standbys = append(c.standbys, m)
	}
	for w := range strings.SplitSeq(ways, ",") {
		w = strings.TrimSpace(w)
		if w != stopTerm && w != stopKill {
			return fmt.Errorf("-ways: %q is neither %s nor %s", w, stopTerm, stopKill)
		}
		c.ways = append(c.ways, w)
	}
	if c.handlerBackoff <= 0 {
		return errors.New("-handler-backoff-max must be positive")
	}
	if c.reviewRate < 0 {
		return errors.New("-reviews must not be negative")
	}
	return nil
}

// benchFailover runs the failover benchmark at each -n.
func benchFailover(ctx context.Context, cfg *config, stderr io.Writer) (rows []failoverRow, err error) {
	err = withEnv(ctx, cfg, stderr, "./test/bench/handler", func(e *env, bin binaries) error {
		for _, n := range cfg.counts {
			rs, err := runFailover(ctx, e, bin, n)
			rows = append(rows, rs...)
			if err != nil {
				return fmt.Errorf("failover N=%d: %w", n, err)
			}
		}
		return nil
	})
	return rows, err
}

// replica is one broker process of the pair and how to start it again.
type replica struct {
	identity, addr string
	admissionAddr  string // its admission listener
	args           []string
	p              *process
	generation     int
}

func (r *replica) start(e *env, bin binaries) error {
	r.generation++
	p, err := startProcess(e, fmt.Sprintf("%s-%d", r.identity, r.generation), bin.broker, r.args...)
	r.p = p
	return err
}

// pair is the two broker replicas, started with the follower caches of one
// -standby mode, and the balancer over their admission listeners that
// stands for the Service selecting every ready replica.
type pair struct {
	replicas  []*replica
	standby   string
	admission *testenv.Balancer
}

func newPair() (*pair, error) {
	p := &pair{}
	var admissionAddrs []string
	for _, id := range []string{"broker-a", "broker-b"} {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		adm, err := freeAddr()
		if err != nil {
			return nil, err
		}
		p.replicas = append(p.replicas, &replica{identity: id, addr: addr, admissionAddr: adm})
		admissionAddrs = append(admissionAddrs, adm)
	}
	var err error
	p.admission, err = testenv.StartBalancer(admissionAddrs...)
	return p, err
}

// start stops the replicas that run and starts both with standby.
func (p *pair) start(e *env, bin binaries, brokerNS, standby string) error {
	p.stop(e)
	p.standby = standby
	for _, r := range p.replicas {
		r.args = []string{"--insecure", "--listen", r.addr, "--kubeconfig", e.cp.KubeconfigPath(), "--metrics-listen", "",
			"--namespace", brokerNS, "--identity", r.identity, "--leader-elect",
			"--admission-listen", r.admissionAddr, "--admission-url", "https://" + r.admissionAddr,
			"--admission-replicas-url", "https://" + p.admission.Addr(),
			"--kube-api-qps", strconv.FormatFloat(e.qps, 'f', -1, 64), "--kube-api-burst", strconv.Itoa(e.burst)}
		if e.leaseDuration > 0 {
			r.args = append(r.args, "--leader-elect-lease-duration", e.leaseDuration.String())
		}
		if standby == standbyCold {
			r.args = append(r.args, "--leader-elect-cold-standby")
		}
		if err := r.start(e, bin); err != nil {
			return err
		}
	}
	return nil
}

func (p *pair) stop(e *env) {
	for _, r := range p.replicas {
		if err := r.p.stop(); err != nil {
			e.progressf("%v", err)
		}
		r.p = nil
	}
}

func (p *pair) addrs() string { return p.replicas[0].addr + "," + p.replicas[1].addr }

// runFailover sets up the handler and the Widgets of one count and then, in
// rounds, for each -standby mode a pair of replicas whose leader it stops
// each of -ways. The modes take turns in each round's lead, so that neither
// always runs first.
func runFailover(ctx context.Context, e *env, bin binaries, n int) (rows []failoverRow, err error) {
	site := &failoverSite{ns: fmt.Sprintf("bench-failover-%d", n)}
	site.brokerNS, site.reviewsNS = site.ns+"-tether", site.ns+"-reviews"
	for _, name := range []string{site.ns, site.brokerNS, site.reviewsNS} {
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	if site.reviewer, err = reviewClient(e.admin); err != nil {
		return nil, err
	}
	brokers, err := newPair()
	if err != nil {
		return nil, err
	}
	var handler *process
	defer func() {
		if err := handler.stop(); err != nil {
			e.progressf("%v", err)
		}
		brokers.stop(e)
		brokers.admission.Close()
	}()
	if err := brokers.start(e, bin, site.brokerNS, e.standbys[0]); err != nil {
		return nil, err
	}
	if _, err := leaseHolder(ctx, e, site.brokerNS, ""); err != nil {
		return nil, err
	}
	args := []string{"-addr", brokers.addrs(), "-name", handlerName, "-namespace", site.ns,
		"-window", strconv.Itoa(e.window), "-backoff-max", e.handlerBackoff.String()}
	if e.reviewRate > 0 {
		args = append(args, "-reviews-namespace", site.reviewsNS)
	}
	if handler, err = startProcess(e, "handler-failover", bin.handler, args...); err != nil {
		return nil, err
	}
	tr, err := startTracker(ctx, e, site.ns, handledByBench)
	if err != nil {
		return nil, err
	}
	defer tr.stop()
	label := fmt.Sprintf("failover N=%d", n)
	e.progressf("%s: creating the Widgets", label)
	if _, _, err := loadAndWait(ctx, e, tr, site.ns, 0, n, label+" create", time.Now(), false); err != nil {
		return nil, err
	}
	for round := 1; round <= e.pairs; round++ {
		order := slices.Clone(e.standbys)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, standby := range order {
			if brokers.standby != standby {
				if err := brokers.start(e, bin, site.brokerNS, standby); err != nil {
					return rows, err
				}
			}
			for _, way := range e.ways {
				r, err := failOver(ctx, e, bin, brokers, site, n, round, way)
				if err != nil {
					return rows, fmt.Errorf("round %d, %s standby, %s: %w", round, standby, way, err)
				}
				e.progressf("%s round %d %s standby %s: leading after %s, ready %s, handler connected %s, new Widget handled %s; writes %.0f, holds lost %d; reviews answered %d, failed open %d, refused %d, failed in flight at the stop %d",
					label, round, standby, way, r.leading.Round(time.Millisecond), r.ready.Round(time.Millisecond),
					r.connected.Round(time.Millisecond), r.handled.Round(time.Millisecond), r.writes, r.lost,
					r.reviews.answered, r.reviews.failedOpen, r.reviews.refused, r.reviews.inFlight)
				if f := r.reviews.first; f != nil {
					e.progressf("the first review that failed after the stop: %s", f)
				}
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

// failoverSite is where one count's failover runs: the Widgets' namespace,
// the brokers', and the review load's with the client it writes as.
type failoverSite struct {
	ns, brokerNS, reviewsNS string
	reviewer                dynamic.Interface
}

// failOver stops the leader one way, measures the takeover and starts the
// stopped replica again as a follower.
func failOver(ctx context.Context, e *env, bin binaries, brokers *pair, site *failoverSite, n, round int, way string) (failoverRow, error) {
	ns := site.ns
	row := failoverRow{n: n, round: round, standby: brokers.standby, way: way}
	holder, err := leaseHolder(ctx, e, site.brokerNS, "")
	if err != nil {
		return row, err
	}
	old, next := brokers.replicas[0], brokers.replicas[1]
	if holder == next.identity {
		old, next = next, old
	}
	// The follower is settled: it has seen the leader, reached its
	// liveness address (a refusal counts only from an address that
	// answered), unless cold filled its caches, and has the handler.
	settled := []string{logWarm, logLiveness}
	if brokers.standby == standbyCold {
		settled[0] = logFollowing
	}
	if e.reviewRate > 0 {
		// The handler's reviews-only session, to answer reviews.
		settled = append(settled, logConnected)
	}
	for _, line := range settled {
		if _, err := waitLog(ctx, next.p, line, time.Time{}); err != nil {
			return row, err
		}
	}
	before, err := settledScrape(ctx, e.kube)
	if err != nil {
		return row, err
	}
	sig := syscall.SIGTERM
	if way == stopKill {
		sig = syscall.SIGKILL
	}
	name := fmt.Sprintf("failover-%d-%s-%s", round, brokers.standby, way)
	reviews, err := startReviews(ctx, e, site.reviewer, site.reviewsNS, name)
	if err != nil {
		return row, err
	}
	if reviews != nil {
		defer reviews.Stop()
	}
	t0 := time.Now()
	if err := old.p.cmd.Process.Signal(sig); err != nil {
		return row, fmt.Errorf("stopping %s: %w", old.identity, err)
	}
	ri := e.load.Resource(controlplane.WidgetGVR).Namespace(ns)
	if _, err := ri.Create(ctx, newWidget(ns, name, 0), metav1.CreateOptions{}); err != nil {
		return row, fmt.Errorf("creating %s: %w", name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, e.timeout, true, func(ctx context.Context) (bool, error) {
		obj, err := ri.Get(ctx, name, metav1.GetOptions{})
		return err == nil && handledByBench(obj), nil
	})
	if err != nil {
		return row, fmt.Errorf("waiting for %s to be handled: %w", name, err)
	}
	row.handled = time.Since(t0)
	<-old.p.done
	for _, step := range []struct {
		line string
		d    *time.Duration
	}{{logLeading, &row.leading}, {logReady, &row.ready}, {logConnected, &row.connected}} {
		at, err := waitLog(ctx, next.p, step.line, t0)
		if err != nil {
			return row, err
		}
		*step.d = at.Sub(t0)
	}
	row.reviews = countReviews(reviews, t0)
	after, err := settledScrape(ctx, e.kube)
	if err != nil {
		return row, err
	}
	// The bench's own creates: the new Widget and the review load's.
	writes := diff(before, after, map[string]float64{"POST": float64(1 + row.reviews.sent)}, 1)
	row.writes = writes.controller
	if row.writes > 1 {
		e.progressf("%s: %.0f writes on Widgets by a broker: %s", name, row.writes, writes.verbs())
	}
	list, err := e.dyn.Resource(controlplane.WidgetGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return row, err
	}
	var written []string
	for i := range list.Items {
		obj := &list.Items[i]
		if !hold.Has(obj, handlerName) {
			row.lost++
		}
		if obj.GetName() != name && writtenSince(obj, t0) {
			written = append(written, obj.GetName())
		}
	}
	if len(written) > 0 {
		e.progressf("written by a broker since the stop, besides %s: %s", name, strings.Join(written[:min(len(written), 10)], ", "))
	}
	return row, old.start(e, bin)
}

// writtenSince reports whether a broker wrote obj after t, as far as
// managedFields tell: they keep whole seconds, so a write in t's second is
// not seen.
func writtenSince(obj *unstructured.Unstructured, t time.Time) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == dispatch.FieldManager && f.Time != nil && f.Time.Time.After(t) {
			return true
		}
	}
	return false
}

// leaseHolder waits until the leader Lease in ns names a holder other than
// not, and returns it.
func leaseHolder(ctx context.Context, e *env, ns, not string) (string, error) {
	var holder string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := e.kube.CoordinationV1().Leases(ns).Get(ctx, "tether-broker-leader", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != "" && holder != not, nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for a broker to lead: %w", err)
	}
	return holder, nil
}

// reportFailover writes the table and the verdict on the time to the new
// leader's first delivery; it reports whether the goal was met.
func reportFailover(w io.Writer, cfg *config, rows []failoverRow) bool {
	lease := "15s (the default)"
	if cfg.leaseDuration > 0 {
		lease = cfg.leaseDuration.String()
	}
	fmt.Fprintf(w, "Tether failover benchmark: kube-apiserver %s, 2 broker replicas with --leader-elect, lease duration %s, handler reconnect backoff up to %s, reviews %d/s\n\n",
		controlplane.KubernetesVersion, lease, cfg.handlerBackoff, cfg.reviewRate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "N\tround\tstandby\tstop\tleading s\tready s\thandler connected s\tnew Widget handled s\tbroker writes\tholds lost\treviews answered\tfailed open\trefused\tfailed in flight")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%d\t%d\t%d\t%d\t%d\n", r.n, r.round, r.standby, r.way,
			r.leading.Seconds(), r.ready.Seconds(), r.connected.Seconds(), r.handled.Seconds(), r.writes, r.lost,
			r.reviews.answered, r.reviews.failedOpen, r.reviews.refused, r.reviews.inFlight)
	}
	tw.Flush()
	fmt.Fprintln(w)
	ok := true
	for _, n := range cfg.counts {
		for _, way := range cfg.ways {
			for _, standby := range cfg.standbys {
				var ready, handled []float64
				lost, failed := 0, 0
				for _, r := range rows {
					if r.n == n && r.way == way && r.standby == standby {
						ready, handled = append(ready, (r.ready-r.leading).Seconds()), append(handled, r.handled.Seconds())
						lost += r.lost
						failed += r.reviews.failed()
					}
				}
				if len(handled) == 0 {
					continue
				}
				line := fmt.Sprintf("N=%d %s, %s standby: leading to ready %.2fs %s, stop to first delivery %.2fs %s, medians of %d; reviews failed after the stop: %d",
					n, way, standby, median(ready), spread(ready, 1), median(handled), spread(handled, 1), len(handled), failed)
				if standby == standbyWarm { // the default is judged
					met := median(handled) < failoverGoal.Seconds() && lost == 0 && failed == 0
					ok = ok && met
					line += fmt.Sprintf(" (goal < %s, no hold lost, no review failed): %s", failoverGoal, passFail(met))
				}
				fmt.Fprintln(w, line)
			}
		}
	}
	return ok
}
