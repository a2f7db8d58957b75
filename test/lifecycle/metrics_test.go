package lifecycle

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// startBrokerWithMetrics is startBroker with the metrics and health
// endpoints on a free loopback port; it returns the gRPC address and the
// endpoints' base URL.
func startBrokerWithMetrics(t *testing.T, cp *controlplane.ControlPlane, tweaks ...func(*broker.Options)) (addr, metricsURL string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tweaks = append(tweaks, func(o *broker.Options) { o.MetricsListener = lis })
	return startBroker(t, cp, tweaks...), "http://" + lis.Addr().String()
}

// TestMetricsAndHealth runs a widget through create and delete and reads
// what it did back from /metrics; /healthz and /readyz answer 200.
func TestMetricsAndHealth(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr, base := startBrokerWithMetrics(t, cp)

	eventually(t, "/readyz to answer 200", func() bool {
		code, _ := scrape(t, base+"/readyz")
		return code == http.StatusOK
	})
	if code, body := scrape(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}

	var j journal
	h := sdk.New("metered", handlerOpts(t)...)
	h.OnCreate(widgets, j.record(nil), sdk.ID("create"), sdk.Namespaces(ns))
	h.OnDelete(widgets, j.record(nil), sdk.ID("delete"), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "m1", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Create, "m1", 1)
	waitObject(t, dyn, widgetGVR, ns, "m1", "held", func(o *unstructured.Unstructured) bool {
		return o != nil && hold.Has(o, "metered")
	})
	del(t, dyn, widgetGVR, ns, "m1")
	j.waitCount(t, sdk.Delete, "m1", 1)
	waitObject(t, dyn, widgetGVR, ns, "m1", "gone", gone)
	create(t, dyn, widgetGVR, widget(ns, "m2", map[string]any{"size": int64(2)}))
	j.waitCount(t, sdk.Create, "m2", 1)

	handler := map[string]string{"handler": "metered"}
	checks := []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
		want   string
	}{
		{"tether_deliveries_total", with(handler, "kind", "create", "outcome", "ok"), atLeast(1), ">= 1"},
		{"tether_deliveries_total", with(handler, "kind", "delete", "outcome", "ok"), atLeast(1), ">= 1"},
		{"tether_ack_latency_seconds", with(handler, "kind", "create"), atLeast(1), ">= 1 observation"},
		{"tether_holds_added_total", handler, atLeast(1), ">= 1"},
		{"tether_holds_released_total", with(handler, "reason", "done"), atLeast(1), ">= 1"},
		{"tether_sessions", handler, equal(1), "1"},
		{"tether_sessions_total", handler, atLeast(1), ">= 1"},
		{"tether_handler_present", handler, equal(1), "1"},
		{"tether_api_writes_total", map[string]string{"resource": "widgets.test.tether.dev", "code": "ok"}, atLeast(1), "> 0"},
		{"tether_cached_objects", map[string]string{"resource": "widgets.test.tether.dev"}, equal(1), "1 (m2)"},
		// m2's JSON, held and handled: its metadata alone takes this much.
		{"tether_cached_bytes", map[string]string{"resource": "widgets.test.tether.dev"}, atLeast(200), ">= 200"},
		{"go_goroutines", nil, atLeast(1), ">= 1"},
	}
	// The counters move right after the writes land, which the test may
	// see first: look until they all hold.
	var failed []string
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		families := metricFamilies(t, base+"/metrics")
		failed = failed[:0]
		for _, c := range checks {
			if got, found := sumOf(families, c.name, c.labels); !found || !c.ok(got) {
				failed = append(failed, fmt.Sprintf("%s%v = %v (found %v), want %s", c.name, c.labels, got, found, c.want))
			}
		}
		return len(failed) == 0, nil
	})
	for _, f := range failed {
		t.Error(f)
	}
	// What the shipped alerts and dashboard query, the broker exports (the
	// admission metrics are test/admission's: no webhook here). The hold
	// gauges come with the first sample, within 10 s.
	var unexported []string
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		families := metricFamilies(t, base+"/metrics")
		unexported = unexported[:0]
		for _, name := range testenv.MonitoredMetrics(t) {
			if _, ok := families[name]; !ok && !strings.HasPrefix(name, "tether_admission_") {
				unexported = append(unexported, name)
			}
		}
		return len(unexported) == 0, nil
	})
	for _, name := range unexported {
		failed = append(failed, name)
		t.Errorf("the alerts or the dashboard (%v) query %s, which the broker does not export", testenv.MonitoringFiles, name)
	}
	if len(failed) > 0 || testing.Verbose() {
		_, body := scrape(t, base+"/metrics")
		var ours []string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "tether_") && !strings.Contains(line, "_bucket{") {
				ours = append(ours, line)
			}
		}
		t.Logf("the broker's metrics:\n%s", strings.Join(ours, "\n"))
	}
}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func atLeast(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
func equal(n float64) func(float64) bool   { return func(v float64) bool { return v == n } }

func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func metricFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := scrape(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return families
}

// sumOf adds up the series of the named family whose labels include
// labels: counter and gauge values, histogram observation counts.
func sumOf(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		found = true
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, found
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
