package metrics

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/workqueue"
)

func TestBindingSeriesFollowTheHandlerAndGoWithIt(t *testing.T) {
	m := New(nil)
	b := m.Binding("h", "cleanup")
	b.Delivered(OutcomeOK, 20*time.Millisecond)
	b.Delivered(OutcomeRetry, 30*time.Millisecond)
	b.Delivered(OutcomeTimeout, 10*time.Second) // no ack: not a run time
	m.Holds().Sampled("h", []string{"cleanup", "create"}, HoldSample{Held: 3, Retrying: map[string]int{"cleanup": 1}, OldestStuck: 90 * time.Second, Stuck: 1})
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "handler-h", MetricsProvider: m.QueueMetrics("h")})
	q.Add("a")
	q.Get()
	q.Done("a")
	q.ShutDown()

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"ok", testutil.ToFloat64(m.bindings.deliveries.WithLabelValues("h", "cleanup", OutcomeOK)), 1},
		{"retry", testutil.ToFloat64(m.bindings.deliveries.WithLabelValues("h", "cleanup", OutcomeRetry)), 1},
		{"gone (made at zero)", testutil.ToFloat64(m.bindings.deliveries.WithLabelValues("h", "cleanup", OutcomeGone)), 0},
		{"retrying cleanup", testutil.ToFloat64(m.bindings.retrying.WithLabelValues("h", "cleanup")), 1},
		{"retrying create", testutil.ToFloat64(m.bindings.retrying.WithLabelValues("h", "create")), 0},
		{"held", testutil.ToFloat64(m.holds.held.WithLabelValues("h")), 3},
		{"stuck for", testutil.ToFloat64(m.holds.stuckFor.WithLabelValues("h")), 90},
		{"stuck", testutil.ToFloat64(m.holds.stuck.WithLabelValues("h")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	body := gather(t, m)
	for _, want := range []string{
		`tether_binding_run_seconds_count{binding="cleanup",handler="h"} 2`,
		`tether_queue_wait_seconds_count{handler="h"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	m.ForgetHandler("h")
	if body := gather(t, m); strings.Contains(body, `handler="h"`) && strings.Contains(body, "tether_binding_") {
		t.Errorf("a forgotten handler's binding series stay:\n%s", body)
	}
	var none *Metrics
	none.Binding("h", "x").Delivered(OutcomeOK, time.Second) // nil is a no-op
	none.Holds().Sampled("h", nil, HoldSample{})
	none.ForgetHandler("h")
	if none.QueueMetrics("h") != nil {
		t.Error("a nil Metrics gives a queue metrics provider")
	}
}

// A delivery answered OK costs no allocation in the binding's metrics.
func TestBindingDeliveredDoesNotAllocate(t *testing.T) {
	b := New(nil).Binding("h", "b")
	if n := testing.AllocsPerRun(1000, func() { b.Delivered(OutcomeOK, time.Millisecond) }); n != 0 {
		t.Errorf("%v allocations per delivery, want 0", n)
	}
}

func gather(t *testing.T, m *Metrics) string {
	t.Helper()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		for _, s := range f.GetMetric() {
			labels := []string{}
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name := f.GetName()
			v := s.GetGauge().GetValue() + s.GetCounter().GetValue()
			if h := s.GetHistogram(); h != nil {
				name, v = name+"_count", float64(h.GetSampleCount())
			}
			b.WriteString(name + "{" + strings.Join(labels, ",") + "} " + strconv.FormatFloat(v, 'f', -1, 64) + "\n")
		}
	}
	return b.String()
}
