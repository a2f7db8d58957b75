package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/typed/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkAdmissionRoundTrip measures what a validating webhook served by
// the broker adds to a create. Each iteration creates two Secrets, one in a
// namespace no webhook covers (direct: the baseline) and one in the
// namespace the handler validates (webhook: the API server calls the
// broker over HTTPS, the broker asks the handler process over gRPC, and the
// answer goes back), in alternating order so that a neighbour's load falls
// on both alike. It reports the client's create latencies: p50 and p99 of
// each, and what the webhook adds at the median.
//
//	go test -run '^$' -bench AdmissionRoundTrip -benchtime 2000x ./test/admission
func BenchmarkAdmissionRoundTrip(b *testing.B) {
	e := start(b)
	h := e.startHandler(b, "bench-policy")
	eventually(b, "the handler's webhook to be enforced", func() bool { return e.refusesUnowned(b) })
	direct := e.cp.Namespace(b)
	create := func(secrets v1.SecretInterface, ns, prefix string) time.Duration {
		s := e.secret(fmt.Sprintf("%s-%d", prefix, probes.Add(1)), "bench")
		s.Namespace = ns
		begin := time.Now()
		if _, err := secrets.Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		return time.Since(begin)
	}
	base := make([]time.Duration, 0, b.N)
	hooked := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			base = append(base, create(e.kube.CoreV1().Secrets(direct), direct, "direct"))
			hooked = append(hooked, create(e.kube.CoreV1().Secrets(e.ns), e.ns, "webhook"))
		} else {
			hooked = append(hooked, create(e.kube.CoreV1().Secrets(e.ns), e.ns, "webhook"))
			base = append(base, create(e.kube.CoreV1().Secrets(direct), direct, "direct"))
		}
	}
	b.StopTimer()
	slices.Sort(base)
	slices.Sort(hooked)
	b.ReportMetric(ms(percentile(base, 0.50)), "direct-p50-ms")
	b.ReportMetric(ms(percentile(base, 0.99)), "direct-p99-ms")
	b.ReportMetric(ms(percentile(hooked, 0.50)), "webhook-p50-ms")
	b.ReportMetric(ms(percentile(hooked, 0.99)), "webhook-p99-ms")
	b.ReportMetric(ms(percentile(hooked, 0.50)-percentile(base, 0.50)), "added-p50-ms")
	if b.N > 1 && !h.saw("VALIDATE "+e.ns+"/webhook-") {
		b.Fatal("the handler never reviewed a create of the webhook run")
	}
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
