package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tether-dev/tether/test/controlplane"
)

// counters are the apiserver_request_total values the benchmark reads.
type counters struct {
	// widgets counts write requests on widgets by "VERB" or
	// "VERB/subresource", and refused those answered with a non-2xx code.
	widgets, refused map[string]float64
	// events counts write requests on events (core and events.k8s.io).
	events float64
}

func isWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

// scrape reads the API server's /metrics once.
func scrape(ctx context.Context, kube kubernetes.Interface) (counters, error) {
	c := counters{widgets: map[string]float64{}, refused: map[string]float64{}}
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return c, fmt.Errorf("reading the API server's /metrics: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		labels, value, ok := parseSample(sc.Text(), "apiserver_request_total")
		if !ok || !isWrite(labels["verb"]) {
			continue
		}
		switch {
		case labels["resource"] == "events":
			c.events += value
		case labels["resource"] == controlplane.WidgetGVR.Resource && labels["group"] == controlplane.WidgetGVR.Group:
			key := labels["verb"]
			if s := labels["subresource"]; s != "" {
				key += "/" + s
			}
			c.widgets[key] += value
			if !strings.HasPrefix(labels["code"], "2") {
				c.refused[key] += value
			}
		}
	}
	return c, sc.Err()
}

// parseSample parses one line of the Prometheus text format if it is a
// sample of metric: name{k="v",...} value [timestamp].
func parseSample(line, metric string) (map[string]string, float64, bool) {
	rest, ok := strings.CutPrefix(line, metric+"{")
	if !ok {
		return nil, 0, false
	}
	labels := map[string]string{}
	for {
		if r, done := strings.CutPrefix(rest, "}"); done {
			rest = r
			break
		}
		rest = strings.TrimPrefix(rest, ",")
		name, r, ok := strings.Cut(rest, `="`)
		if !ok {
			return nil, 0, false
		}
		var val strings.Builder
		i := 0
		for ; i < len(r) && r[i] != '"'; i++ {
			if r[i] == '\\' && i+1 < len(r) {
				i++
			}
			val.WriteByte(r[i])
		}
		if i == len(r) {
			return nil, 0, false
		}
		labels[name] = val.String()
		rest = r[i+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return labels, v, err == nil
}

// settledScrape scrapes until two scrapes half a second apart agree on the
// write counters, so that writes still being counted (or a controller's
// trailing writes) are included. It gives up waiting after 15 s and returns
// the last scrape.
func settledScrape(ctx context.Context, kube kubernetes.Interface) (counters, error) {
	prev, err := scrape(ctx, kube)
	if err != nil {
		return prev, err
	}
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return prev, ctx.Err()
		case <-tick.C:
		}
		cur, err := scrape(ctx, kube)
		if err != nil {
			return cur, err
		}
		if cur.total() == prev.total() {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

func (c counters) total() float64 {
	t := c.events
	for _, v := range c.widgets {
		t += v
	}
	return t
}

// delta is what the controller wrote between two scrapes, per object: the
// bench client's own requests (own, by verb) are taken out.
type delta struct {
	perObject  map[string]float64 // widgets writes per object by verb
	refused    float64            // refused widgets writes per object
	events     float64            // events writes per object
	controller float64            // all controller writes on widgets, absolute
}

// add adds o, a delta of the same n, to d: the writes of two slices of a
// phase.
func (d *delta) add(o delta) {
	for k, v := range o.perObject {
		d.perObject[k] += v
	}
	d.refused += o.refused
	d.events += o.events
	d.controller += o.controller
}

func diff(before, after counters, own map[string]float64, n int) delta {
	d := delta{perObject: map[string]float64{}}
	for k, v := range after.widgets {
		w := v - before.widgets[k] - own[k]
		if w != 0 {
			d.perObject[k] = w / float64(n)
			d.controller += w
		}
	}
	for k, v := range after.refused {
		d.refused += (v - before.refused[k]) / float64(n)
	}
	d.events = (after.events - before.events) / float64(n)
	return d
}

func (d delta) verbs() string {
	if len(d.perObject) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(d.perObject))
	for k := range d.perObject {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, d.perObject[k])
	}
	return strings.Join(parts, ", ")
}

// peakRSS returns VmHWM of process pid, in MiB.
func peakRSS(pid int) (float64, error) { return statusMiB(pid, "VmHWM") }

// tracker watches the Widgets of one namespace from the bench process and
// records when each benchmark object (name prefix "w-") became done (ready
// returned true) and when it was gone.
type tracker struct {
	ready func(*unstructured.Unstructured) bool
	stop  context.CancelFunc

	mu              sync.Mutex
	done, gone      map[string]bool
	lastDone, lastG time.Time
}

func startTracker(ctx context.Context, e *env, ns string, ready func(*unstructured.Unstructured) bool) (*tracker, error) {
	ctx, cancel := context.WithCancel(ctx)
	t := &tracker{ready: ready, stop: cancel, done: map[string]bool{}, gone: map[string]bool{}}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(e.dyn, 0, ns, nil)
	inf := f.ForResource(controlplane.WidgetGVR).Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.seen,
		UpdateFunc: func(_, obj any) { t.seen(obj) },
		DeleteFunc: t.deleted,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("tracker informer for %s did not sync: %w", ns, ctx.Err())
	}
	return t, nil
}

func (t *tracker) seen(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || !strings.HasPrefix(u.GetName(), "w-") || !t.ready(u) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done[u.GetName()] {
		t.done[u.GetName()] = true
		t.lastDone = time.Now()
	}
}

func (t *tracker) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || !strings.HasPrefix(u.GetName(), "w-") {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.gone[u.GetName()] {
		t.gone[u.GetName()] = true
		t.lastG = time.Now()
	}
}

// counts returns how many objects are done and gone, and when the last of
// each happened.
func (t *tracker) counts(deleting bool) (int, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if deleting {
		return len(t.gone), t.lastG
	}
	return len(t.done), t.lastDone
}

// wait waits until n objects are done (or gone, when deleting), printing
// progress on stderr every few seconds, and returns when the last one was.
func (t *tracker) wait(ctx context.Context, e *env, label string, n int, start time.Time, deleting bool) (time.Time, error) {
	var at time.Time
	lastReport := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, e.timeout, true, func(context.Context) (bool, error) {
		got, last := t.counts(deleting)
		if got >= n {
			at = last
			return true, nil
		}
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			el := time.Since(start).Seconds()
			e.progressf("%s: %d/%d after %.0fs (%.0f/s)", label, got, n, el, float64(got)/el)
		}
		return false, nil
	})
	if err != nil {
		got, _ := t.counts(deleting)
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			return at, fmt.Errorf("%d/%d done: %w", got, n, cause)
		}
		if e.interrupted() {
			return at, fmt.Errorf("interrupted with %d/%d done", got, n)
		}
		return at, fmt.Errorf("only %d/%d done within -timeout %s", got, n, e.timeout)
	}
	return at, nil
}
