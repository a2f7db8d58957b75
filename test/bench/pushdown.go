package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tether-dev/tether/test/controlplane"
)

// The label-pushdown benchmark (-pushdown): N Widgets of which -labelled
// percent carry tier=hot, and the bench handler binding tier=hot only. The
// broker runs with its default, which asks the API server for those Widgets
// only (binding.Pushdown), and with --no-label-pushdown, which caches them
// all, in turns (ABAB, -pairs pairs), each a fresh process once every hot
// Widget is handled. It reports what the broker caches and its memory.

const (
	pushdownCounts = "10000"
	hotLabel       = "tier=hot"
	pushOn         = "pushdown"
	pushOff        = "no-pushdown"
)

type pushdownRow struct {
	n       int
	mode    string
	round   int
	cached  float64 // tether_cached_objects of Widgets
	bytes   float64 // tether_cached_bytes of Widgets
	ready   time.Duration
	mem     memPeak
	handled int
}

// benchPushdown runs the label-pushdown benchmark at each -n.
func benchPushdown(ctx context.Context, cfg *config, stderr io.Writer) (rows []pushdownRow, err error) {
	err = withEnv(ctx, cfg, stderr, "./test/bench/handler", func(e *env, bin binaries) error {
		for _, n := range cfg.counts {
			ns := fmt.Sprintf("bench-pushdown-%d", n)
			if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating namespace %s: %w", ns, err)
			}
			hot, err := createLabelled(ctx, e, ns, n, cfg.labelled)
			if err != nil {
				return err
			}
			for round := 1; round <= cfg.pairs; round++ {
				modes := []string{pushOn, pushOff}
				if round%2 == 0 {
					slices.Reverse(modes)
				}
				for _, mode := range modes {
					row, err := runPushdown(ctx, e, bin, ns, n, hot, mode, round)
					if err != nil {
						return fmt.Errorf("pushdown N=%d %s: %w", n, mode, err)
					}
					e.progressf("N=%d round %d %s: %.0f Widgets cached (%.1f MiB), peak RSS %.1f MiB (private %.1f), ready in %s",
						n, round, mode, row.cached, row.bytes/(1<<20), row.mem.rss, row.mem.private, row.ready.Round(100*time.Millisecond))
					rows = append(rows, row)
				}
			}
		}
		return nil
	})
	return rows, err
}

// createLabelled creates n Widgets in ns, the first share percent of them
// labelled tier=hot, and returns how many are.
func createLabelled(ctx context.Context, e *env, ns string, n int, share float64) (int, error) {
	hot := int(float64(n) * share / 100)
	e.progressf("creating %d Widgets in %s, %d of them %s", n, ns, hot, hotLabel)
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 16 {
		wg.Go(func() {
			for i := range next {
				w := newWidget(ns, widgetName(i), 1)
				if i < hot {
					w.SetLabels(map[string]string{"tier": "hot"})
				}
				if _, err := e.load.Resource(controlplane.WidgetGVR).Namespace(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("creating Widget %s: %w", w.GetName(), err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return hot, firstErr
}

// runPushdown starts a broker in mode and the handler, waits until every
// hot Widget is handled and the broker's cache holds still, and reads what
// it caches and its memory.
func runPushdown(ctx context.Context, e *env, bin binaries, ns string, n, hot int, mode string, round int) (pushdownRow, error) {
	row := pushdownRow{n: n, mode: mode, round: round}
	addr, err := freeAddr()
	if err != nil {
		return row, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return row, err
	}
	brokerNS := ns + "-tether-" + mode
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: brokerNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return row, fmt.Errorf("creating namespace %s: %w", brokerNS, err)
	}
	args := []string{"--insecure", "--listen", addr, "--kubeconfig", e.cp.KubeconfigPath(), "--metrics-listen", metricsAddr,
		"--namespace", brokerNS, "--log-level", "warn"}
	if mode == pushOff {
		args = append(args, "--no-label-pushdown")
	}
	begin := time.Now()
	broker, err := startProcess(e, fmt.Sprintf("broker-%d-%s-%d", n, mode, round), bin.broker, args...)
	if err != nil {
		return row, err
	}
	defer broker.stop()
	if err := waitServing(ctx, addr); err != nil {
		return row, err
	}
	handler, err := startProcess(e, fmt.Sprintf("handler-%d-%s-%d", n, mode, round), bin.handler,
		"-addr", addr, "-namespace", ns, "-labels", hotLabel, "-name", "pushed-"+mode)
	if err != nil {
		return row, err
	}
	defer handler.stop()
	var last float64
	err = wait.PollUntilContextTimeout(ctx, time.Second, e.timeout, true, func(ctx context.Context) (bool, error) {
		list, err := e.dyn.Resource(controlplane.WidgetGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: hotLabel})
		if err != nil {
			return false, err
		}
		row.handled = 0
		for i := range list.Items {
			if strings.Contains(strings.Join(list.Items[i].GetFinalizers(), ","), "tether.dev/pushed-"+mode) {
				row.handled++
			}
		}
		if row.cached, row.bytes, err = brokerCache(ctx, metricsAddr); err != nil {
			return false, nil // not serving metrics yet
		}
		settled := row.cached > 0 && row.cached == last
		last = row.cached
		return row.handled == hot && settled, nil
	})
	if err != nil {
		return row, fmt.Errorf("waiting for %d hot Widgets handled (%d) and the cache to settle (%v): %w", hot, row.handled, row.cached, err)
	}
	row.ready = time.Since(begin)
	row.mem = broker.memory("broker")
	return row, row.mem.err
}

// brokerCache reads the broker's tether_cached_objects and
// tether_cached_bytes of Widgets.
func brokerCache(ctx context.Context, addr string) (objects, bytes float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		for metric, into := range map[string]*float64{"tether_cached_objects": &objects, "tether_cached_bytes": &bytes} {
			if labels, v, ok := parseSample(lines.Text(), metric); ok && labels["resource"] == "widgets.test.tether.dev" {
				*into = v
			}
		}
	}
	return objects, bytes, lines.Err()
}

// reportPushdown writes the table and, for each N, the medians of the
// two modes; it reports whether pushdown cached no more than the hot
// Widgets in every round.
func reportPushdown(w io.Writer, cfg *config, rows []pushdownRow) bool {
	fmt.Fprintf(w, "Tether label-pushdown benchmark: kube-apiserver %s, %s, %.0f%% of the Widgets %s, the handler binding %s\n\n",
		controlplane.KubernetesVersion, loadAverage(), cfg.labelled, hotLabel, hotLabel)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "N\tround\tbroker\tWidgets cached\tcached MiB\tpeak RSS MiB (private)\tto ready")
	ok := true
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.0f\t%.2f\t%.1f (%.1f)\t%s\n", r.n, r.round, r.mode, r.cached, r.bytes/(1<<20), r.mem.rss, r.mem.private, r.ready.Round(100*time.Millisecond))
		if r.mode == pushOn && r.cached > float64(int(float64(r.n)*cfg.labelled/100)) {
			ok = false
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, n := range cfg.counts {
		med := func(mode string, f func(pushdownRow) float64) float64 {
			var v []float64
			for _, r := range rows {
				if r.n == n && r.mode == mode {
					v = append(v, f(r))
				}
			}
			return median(v)
		}
		rss := func(r pushdownRow) float64 { return r.mem.rss }
		private := func(r pushdownRow) float64 { return r.mem.private }
		fmt.Fprintf(w, "N=%d: broker peak RSS %.1f MiB with pushdown, %.1f without; private %.1f and %.1f MiB (medians of %d rounds)\n",
			n, med(pushOn, rss), med(pushOff, rss), med(pushOn, private), med(pushOff, private), cfg.pairs)
	}
	return ok
}
