package broker

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker/metrics"
)

func newTestBroker(t *testing.T, metricsListen string) *Broker {
	t.Helper()
	b, err := New(Options{
		Config: &rest.Config{Host: "http://127.0.0.1:1"}, Listen: "127.0.0.1:0", Insecure: true,
		MetricsListen: metricsListen,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// The endpoints bind in Listen (port 0 works), /healthz answers while the
// process serves, and /readyz only between serving and shutdown.
func TestMetricsAndHealthEndpoints(t *testing.T) {
	b := newTestBroker(t, "127.0.0.1:0")
	if b.MetricsAddr() != nil {
		t.Fatal("a metrics address before Listen")
	}
	if err := b.Listen(); err != nil {
		t.Fatal(err)
	}
	defer b.lis.Close()
	if b.MetricsAddr() == nil {
		t.Fatal("no metrics address after Listen")
	}
	stop := b.serveMetrics(nil)
	base := "http://" + b.MetricsAddr().String()

	ready := func(want int) {
		t.Helper()
		if code, body := httpGet(t, base+"/readyz"); code != want {
			t.Errorf("/readyz: got %d (%s), want %d", code, strings.TrimSpace(body), want)
		}
	}
	if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: got %d", code)
	}
	ready(http.StatusServiceUnavailable)
	b.health.serving.Store(true)
	ready(http.StatusServiceUnavailable) // not synced yet
	b.health.synced.Store(true)
	ready(http.StatusOK)
	b.health.stopping.Store(true)
	ready(http.StatusServiceUnavailable)

	b.metrics.Holds().Released("h", metrics.ReleaseUninstall)
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: got %d", code)
	}
	for _, want := range []string{`tether_holds_released_total{handler="h",reason="uninstall"} 1`, "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	stop()
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the endpoints still answer after stop")
	}
}

func TestMetricsOff(t *testing.T) {
	b := newTestBroker(t, "")
	if err := b.Listen(); err != nil {
		t.Fatal(err)
	}
	defer b.lis.Close()
	if b.MetricsAddr() != nil {
		t.Errorf("metrics address %v with MetricsListen empty", b.MetricsAddr())
	}
	b.serveMetrics(nil)() // a no-op
}

// A taken metrics address fails Listen with an error that says so, and
// leaves the gRPC address free.
func TestMetricsAddressTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	b := newTestBroker(t, taken.Addr().String())
	err = b.Listen()
	if !errors.Is(err, ErrMetricsListen) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen: got %v, want ErrMetricsListen and EADDRINUSE", err)
	}
	if b.Addr() != nil {
		t.Error("the gRPC listener is kept after a failed Listen")
	}
}

func TestTruncateKeepsWholeRunes(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg…"},
		{"ééééééé", 10, "ééé…"}, // 14 bytes; é is 2, … is 3
	} {
		if got := truncate(c.in, c.n); got != c.want || len(got) > c.n {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// TestReadinessOfElectedReplicas: with leader election a replica is ready
// once it serves, synced or not (a follower never syncs; the Service finds
// the leader by LeaderLabel); alone, a broker is ready once synced.
func TestReadinessOfElectedReplicas(t *testing.T) {
	for _, c := range []struct {
		name                               string
		serving, synced, stopping, elected bool
		ready                              bool
	}{
		{"alone, not synced", true, false, false, false, false},
		{"alone, synced", true, true, false, false, true},
		{"elected follower", true, false, false, true, true},
		{"elected, not serving", false, false, false, true, false},
		{"elected, stopping", true, true, true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h readiness
			h.serving.Store(c.serving)
			h.synced.Store(c.synced)
			h.stopping.Store(c.stopping)
			h.elected.Store(c.elected)
			if got := h.notReady() == ""; got != c.ready {
				t.Errorf("ready = %t (%q), want %t", got, h.notReady(), c.ready)
			}
		})
	}
}
