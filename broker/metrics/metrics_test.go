package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestNilIsANoOp(t *testing.T) {
	var m *Metrics
	m.Delivered("h", "create", OutcomeOK, time.Millisecond)
	m.SetQueueDepth("h", 3)
	m.TimersScheduled("h", 2)
	m.Holds().Added("h")
	m.Holds().Released("h", ReleaseDone)
	m.Presence().Opened("h")
	m.Presence().Closed("h")
	m.API().Wrote(VerbPatch, "widgets", CodeOK)
	m.Presence().Present("h", true)
	if m.Gatherer() != nil {
		t.Error("a nil Metrics has a gatherer")
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Metrics' handler: got %d, want 404", rec.Code)
	}
}

func TestCountersMove(t *testing.T) {
	m := New(nil)
	m.Delivered("h", "create", OutcomeOK, 20*time.Millisecond)
	m.Delivered("h", "create", OutcomeOK, 30*time.Millisecond)
	m.Delivered("h", "create", OutcomeTimeout, 10*time.Second)
	m.Holds().Added("h")
	m.Holds().Released("h", ReleaseDone)
	m.Holds().Released("h", ReleaseAbsent)
	m.Holds().Released("h", ReleaseAbsent)
	m.Presence().Opened("h")
	m.Presence().Opened("h")
	m.Presence().Closed("h")
	m.API().Wrote(VerbPatch, "widgets.test.tether.dev", CodeOK)
	m.API().Wrote(VerbPatch, "widgets.test.tether.dev", CodeConflict)
	m.SetQueueDepth("h", 7)
	m.TimersScheduled("h", 4)
	m.Presence().Present("h", true)
	m.Presence().Present("h", false)

	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"deliveries ok", m.deliveries.WithLabelValues("h", "create", OutcomeOK), 2},
		{"deliveries timeout", m.deliveries.WithLabelValues("h", "create", OutcomeTimeout), 1},
		{"holds added", m.holds.added.WithLabelValues("h"), 1},
		{"released done", m.holds.released.WithLabelValues("h", ReleaseDone), 1},
		{"released absent", m.holds.released.WithLabelValues("h", ReleaseAbsent), 2},
		{"released uninstall", m.holds.released.WithLabelValues("h", ReleaseUninstall), 0},
		{"sessions", m.presence.sessions.WithLabelValues("h"), 1},
		{"sessions total", m.presence.sessionsTotal.WithLabelValues("h"), 2},
		{"writes ok", m.api.writes.WithLabelValues(VerbPatch, "widgets.test.tether.dev", CodeOK), 1},
		{"writes conflict", m.api.writes.WithLabelValues(VerbPatch, "widgets.test.tether.dev", CodeConflict), 1},
		{"queue depth", m.queueDepth.WithLabelValues("h"), 7},
		{"timers", m.timers.WithLabelValues("h"), 4},
		{"present", m.presence.present.WithLabelValues("h"), 0},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	// Only the two acked attempts are in the latency histogram.
	want := `
# HELP tether_ack_latency_seconds Time from the start of a delivery attempt (including waiting for a window slot) to its ack.
# TYPE tether_ack_latency_seconds histogram
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.001"} 0
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.0025"} 0
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.005"} 0
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.01"} 0
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.025"} 1
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.05"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.1"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.25"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="0.5"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="1"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="2.5"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="5"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="10"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="30"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="60"} 2
tether_ack_latency_seconds_bucket{handler="h",kind="create",le="+Inf"} 2
tether_ack_latency_seconds_sum{handler="h",kind="create"} 0.05
tether_ack_latency_seconds_count{handler="h",kind="create"} 2
`
	if err := testutil.CollectAndCompare(m.ackLatency, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The first sight of a handler makes its hold series exist at zero.
func TestHandlerSeriesStartAtZero(t *testing.T) {
	m := New(nil)
	m.Presence().Present("h", true)
	if n := testutil.CollectAndCount(m.holds.released); n != len(ReleaseReasons) {
		t.Errorf("released series: got %d, want %d", n, len(ReleaseReasons))
	}
	if n := testutil.CollectAndCount(m.holds.added); n != 1 {
		t.Errorf("added series: got %d, want 1", n)
	}
}

// Metrics on a private registry are independent; two on one registry share
// their series instead of failing.
func TestRegistries(t *testing.T) {
	a, b := New(nil), New(nil)
	a.Holds().Added("h")
	if got := testutil.ToFloat64(b.holds.added.WithLabelValues("h")); got != 0 {
		t.Errorf("private registries share a counter: %v", got)
	}
	reg := prometheus.NewRegistry()
	c, d := New(reg), New(reg)
	c.Holds().Added("h")
	d.Holds().Added("h")
	if got := testutil.ToFloat64(c.holds.added.WithLabelValues("h")); got != 2 {
		t.Errorf("shared registry: got %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "tether_holds_added_total"); err != nil || n != 1 {
		t.Errorf("gathered %d series (%v), want 1", n, err)
	}
}

func TestHandlerServes(t *testing.T) {
	reg := NewRegistry()
	m := New(reg)
	m.Presence().Opened("secret-ttl")
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`tether_sessions{handler="secret-ttl"} 1`, "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestWriteCode(t *testing.T) {
	gr := schema.GroupResource{Group: "test.tether.dev", Resource: "widgets"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, CodeOK},
		{apierrors.NewConflict(gr, "w", errors.New("changed")), CodeConflict},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "w", nil), CodeConflict},
		{apierrors.NewNotFound(gr, "w"), CodeNotFound},
		{apierrors.NewForbidden(gr, "w", errors.New("no")), "4xx"},
		{apierrors.NewInternalError(errors.New("boom")), "5xx"},
		{apierrors.NewServiceUnavailable("later"), "5xx"},
		{errors.New("connection refused"), CodeError},
	} {
		if got := WriteCode(c.err); got != c.want {
			t.Errorf("WriteCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestTheOrphanGaugeFollowsTheHandlerAndGoesWithItsRelease(t *testing.T) {
	m := New(nil)
	for _, c := range []struct {
		orphaned, forget bool
		want             string // the series as exposed; "" none
	}{
		{true, false, `tether_handler_orphaned{handler="h"} 1`},
		{false, false, `tether_handler_orphaned{handler="h"} 0`},
		{true, false, `tether_handler_orphaned{handler="h"} 1`},
		{false, true, ""},
	} {
		m.Presence().Orphaned("h", c.orphaned, c.forget)
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body := rec.Body.String()
		if c.want == "" {
			if strings.Contains(body, `tether_handler_orphaned{handler="h"}`) {
				t.Errorf("released handler still has a series:\n%s", body)
			}
			continue
		}
		if !strings.Contains(body, c.want) {
			t.Errorf("after Presence().Orphaned(%v, %v): no %q", c.orphaned, c.forget, c.want)
		}
	}
}
