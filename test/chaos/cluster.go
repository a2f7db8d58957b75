package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/test/pyinterp"
)

// startBrokers starts two broker replicas with leader election, each
// reaching the API server through its own link, and waits until one leads.
func (r *run) startBrokers(ctx context.Context, bin string) error {
	api, err := url.Parse(r.cp.URL())
	if err != nil {
		return err
	}
	kubeconfig, err := os.ReadFile(r.cp.KubeconfigPath())
	if err != nil {
		return err
	}
	var toBrokers []string
	for _, name := range []string{"broker-a", "broker-b"} {
		apiLink, err := r.links.add(name+"->apiserver", api.Host)
		if err != nil {
			return err
		}
		// The API server's certificate is for 127.0.0.1, whatever the port.
		path := filepath.Join(r.opts.Dir, name+".kubeconfig")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(kubeconfig), r.cp.URL(), "https://"+apiLink)), 0o600); err != nil {
			return err
		}
		listen, metrics, admission := freeAddr(), freeAddr(), freeAddr()
		link, err := r.links.add("handlers->"+name, listen)
		if err != nil {
			return err
		}
		toBrokers = append(toBrokers, link)
		args := append([]string{"--kubeconfig", path, "--listen", listen, "--insecure", "--namespace", brokerNamespace,
			"--identity", name, "--metrics-listen", metrics, "--log-level", "debug",
			"--leader-elect", "--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms",
			"--default-backoff", "100ms", "--default-max-backoff", "1s",
			// The webhooks point at the front, which forwards to the leader.
			"--admission-listen", admission, "--admission-url", "https://" + r.front.addr()}, r.opts.BrokerFlags...)
		p := &proc{name: name, bin: bin, args: args, dir: r.opts.Dir, supervise: true, restarted: r.restarted}
		if r.opts.Break != "" {
			p.env = []string{"TETHER_CHAOS_BREAK=" + r.opts.Break}
		}
		if err := p.start(); err != nil {
			return err
		}
		r.brokers[name], r.metricsAddrs[name], r.admissionAddrs[name] = p, metrics, admission
		r.brokerNames = append(r.brokerNames, name)
	}
	r.handlerBrokers = strings.Join(toBrokers, ",")
	return until(ctx, time.Minute, "a broker to lead", func() bool {
		_, err := r.leader(ctx)
		return err == nil
	})
}

// leaderAdmission is the leading broker's admission address.
func (r *run) leaderAdmission(ctx context.Context) (string, error) {
	p, err := r.leader(ctx)
	if err != nil {
		return "", err
	}
	return r.admissionAddrs[p.name], nil
}

// pythonInstance names the handler instance on the Python SDK.
const pythonInstance = "handler-py"

// startHandlers starts three handler instances on the Go SDK and, where
// Python can run it, one on the Python SDK: instances of one handler, with
// the same bindings.
func (r *run) startHandlers(bins binaries) {
	for i := 1; i <= 3; i++ {
		r.startHandler(fmt.Sprintf("handler-%d", i), bins.handler, nil)
	}
	if bins.pyHandler != "" {
		// -I: no PYTHON* variables or user site-packages; -B: no
		// __pycache__ in the source tree; -u: unbuffered lines.
		r.startHandler(pythonInstance, pyinterp.Python, []string{"-I", "-B", "-u", bins.pyHandler})
	}
}

// startHandler starts one handler instance: bin with lead before the
// handler's flags.
func (r *run) startHandler(name, bin string, lead []string) {
	p := &proc{name: name, bin: bin, lead: lead, dir: r.opts.Dir, onLine: r.onDelivery, supervise: true, restarted: r.restarted}
	p.args = r.handlerArgs(name)
	r.handlers[name] = p
	r.handlerNames = append(r.handlerNames, name)
	if err := p.start(); err != nil {
		r.progress("%v", err)
	}
}

// awaitHolding waits until the handler holds a new widget, which means a
// broker leads, its informers synced and an instance is connected, and
// then deletes the widget again. Its going is the checker's to judge, with
// the rest: a broker built to keep holds keeps this one too.
func (r *run) awaitHolding(ctx context.Context, dyn dynamic.Interface) error {
	ri := dyn.Resource(widgetGVR).Namespace(loadNamespace)
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "probe"}, "spec": map[string]any{"size": int64(1)},
	}}
	if _, err := ri.Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the probe widget: %w", err)
	}
	if err := until(ctx, time.Minute, "the handler to hold the probe widget", func() bool {
		got, err := ri.Get(ctx, "probe", metav1.GetOptions{})
		return err == nil && slices.Contains(got.GetFinalizers(), HoldPrefix+handlerName)
	}); err != nil {
		return err
	}
	if err := ri.Delete(ctx, "probe", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the probe widget: %w", err)
	}
	return nil
}

// until polls cond every 100ms until it holds, or fails after timeout.
func until(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: not within %v", what, timeout)
		}
		wait(ctx, 100*time.Millisecond)
	}
	return nil
}

// restarted notes a supervised process that exited by itself and was
// started again.
func (r *run) restarted(name string) { r.progress("%s exited by itself; started again", name) }

// stopAll ends the handlers (with SIGTERM, so that they say Goodbye), then
// the brokers.
func (r *run) stopAll() {
	for _, h := range r.handlers {
		h.terminate()
	}
	for _, b := range r.brokers {
		b.terminate()
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("no free port: %v", err))
	}
	defer l.Close()
	return l.Addr().String()
}

// sample is a broker's goroutines and resident memory at one moment.
type sample struct {
	at         time.Time
	generation int
	// leading: the process held the leader Lease. A follower runs no
	// handlers, so its figures grow when it takes over: only a leader's
	// samples are compared.
	leading    bool
	goroutines int
	rss        int64
}

// Every sampleEvery during the load, each running broker is sampled; the
// samples of a process's first warmUp as leader are not judged (its
// informers list, its handlers' instances connect).
const (
	sampleEvery = 10 * time.Second
	warmUp      = 30 * time.Second
)

// sampleUntilDone samples the brokers every sampleEvery until ctx ends.
func (r *run) sampleUntilDone(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sampleBrokers(ctx)
		}
	}
}

// sampleBrokers reads the goroutines and memory of every running broker
// from its metrics.
func (r *run) sampleBrokers(ctx context.Context) {
	leader, _ := r.leader(ctx) // nil while none leads
	for name, b := range r.brokers {
		if !b.running() {
			continue
		}
		s, err := scrape(ctx, r.metricsAddrs[name])
		if err != nil {
			if ctx.Err() == nil {
				r.progress("sampling %s: %v", name, err)
			}
			continue
		}
		s.at, s.leading = time.Now(), b == leader
		b.mu.Lock()
		s.generation = b.generation
		b.mu.Unlock()
		r.mu.Lock()
		r.samples[name] = append(r.samples[name], s)
		r.mu.Unlock()
	}
}

func scrape(ctx context.Context, addr string) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return sample{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	var s sample
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			s.goroutines = int(f)
		case "process_resident_memory_bytes":
			s.rss = int64(f)
		}
	}
	return s, sc.Err()
}

// brokerReports are each broker's panics, from its log, and the samples
// of its process that led longest.
func (r *run) brokerReports() []BrokerReport {
	var out []BrokerReport
	for _, name := range r.brokerNames {
		rep := BrokerReport{Name: name, Panics: panics(filepath.Join(r.opts.Dir, name+".log"))}
		r.mu.Lock()
		first, last, ok := longestLeading(r.samples[name])
		r.mu.Unlock()
		if ok {
			rep.Process, rep.Sampled = first.generation, last.at.Sub(first.at)
			rep.FirstGoroutines, rep.LastGoroutines, rep.FirstRSS, rep.LastRSS = first.goroutines, last.goroutines, first.rss, last.rss
		}
		out = append(out, rep)
	}
	return out
}

// longestLeading picks, among a broker's processes (generations), the one
// sampled as leader over the longest time once warm: its first leading
// sample warmUp past its first and its last. A broker killed and restarted
// many times is still judged by the process that led longest; ok is false
// when none led past warmUp with two samples.
func longestLeading(ss []sample) (first, last sample, ok bool) {
	born := map[int]time.Time{}
	warm := map[int]sample{}
	for _, s := range ss {
		if !s.leading {
			continue
		}
		if _, seen := born[s.generation]; !seen {
			born[s.generation] = s.at
		}
		if w, seen := warm[s.generation]; s.at.Sub(born[s.generation]) >= warmUp {
			if !seen {
				warm[s.generation] = s
			} else if span := s.at.Sub(w.at); !ok || span > last.at.Sub(first.at) {
				first, last, ok = w, s, true
			}
		}
	}
	return first, last, ok
}

// panics are the lines of a log that begin a panic, a fatal error or a
// data race report.
func panics(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{fmt.Sprintf("reading the log: %v", err)}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") || strings.Contains(l, "WARNING: DATA RACE") {
			out = append(out, l)
		}
	}
	return out
}
