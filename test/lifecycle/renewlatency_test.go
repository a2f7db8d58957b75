package lifecycle

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// chaosLatency is the largest latency the chaos runs put on a link, each
// way: 1.5 s plus its jitter of a quarter (test/chaos, net-latency).
const chaosLatency = 1875 * time.Millisecond

// TestLeaderKeepsItsLeaseUnderTheChaosLatency: a broker with the default
// leader election flags reaches the API server through a link that holds
// every byte back chaosLatency each way (a request takes 3.75 s). It
// leads, and renews the Lease again and again without losing it: a
// renewal is one request, and nothing else the broker writes to the Lease
// makes a renewal conflict and take three (11 s, past the 10 s renew
// deadline).
func TestLeaderKeepsItsLeaseUnderTheChaosLatency(t *testing.T) {
	cp := controlplane.Get(t)
	brokerNS := cp.Namespace(t)
	kubeconfig, err := os.ReadFile(cp.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	slow := filepath.Join(t.TempDir(), "slow.kubeconfig")
	link := latencyProxy(t, strings.TrimPrefix(cp.URL(), "https://"), chaosLatency)
	if err := os.WriteFile(slow, []byte(strings.ReplaceAll(string(kubeconfig), cp.URL(), "https://"+link)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBrokerProcess(t, cp, freeAddr(t), brokerNS, "--identity", "slow", "--leader-elect", "--kubeconfig", slow)
	testenv.Eventually(t, 2*time.Minute, "the broker leads", func() bool {
		return b.out.Any(func(l string) bool { return strings.Contains(l, "leading: this replica watches") })
	})
	renewals := map[time.Time]bool{}
	testenv.Eventually(t, 2*time.Minute, "four renewals of the Lease", func() bool {
		lease, err := cp.Client().CoordinationV1().Leases(brokerNS).Get(context.Background(), "tether-broker-leader", metav1.GetOptions{})
		if err == nil && lease.Spec.RenewTime != nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "slow" {
			renewals[lease.Spec.RenewTime.Time] = true
		}
		return len(renewals) > 4 || b.out.Any(lostLease)
	})
	if b.out.Any(lostLease) {
		t.Fatalf("the leader lost its Lease under a latency of %v each way", chaosLatency)
	}
}

func lostLease(l string) bool {
	return strings.Contains(l, "no longer leading") || strings.Contains(l, "lost the leader lease")
}

// latencyProxy forwards the connections it accepts to target, holding every
// chunk of data back for delay each way, as toxiproxy's latency toxic does;
// it returns its address.
func latencyProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go delayCopy(out, in, delay)
			go delayCopy(in, out, delay)
		}
	}()
	return lis.Addr().String()
}

// delayCopy copies src to dst, each chunk delay after it was read, and
// closes both at the end.
func delayCopy(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer src.Close()
	defer dst.Close()
	for c := range chunks {
		<-time.After(time.Until(c.due)) // the latency itself, not a wait for a condition
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}
