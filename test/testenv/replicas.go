package testenv

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LeaderLease is the Lease broker replicas with --leader-elect contend for.
const LeaderLease = "tether-broker-leader"

// Replicas is where broker replicas with leader election listen, each with
// its own gRPC and admission address, and the admission front: a Balancer
// over every replica's admission listener, standing for the Service
// tether-broker-admission. The every-replica tests of each SDK start their
// broker processes with Args, so that they run the same election.
type Replicas struct {
	IDs       []string // each replica's --identity
	Addrs     []string // each replica's gRPC address
	Admission []string // each replica's admission address
	Front     *Balancer
}

// NewReplicas picks free addresses for n replicas and starts their
// admission front, closed when the test ends.
func NewReplicas(t testing.TB, n int) *Replicas {
	t.Helper()
	r := &Replicas{}
	for i := range n {
		r.IDs = append(r.IDs, fmt.Sprintf("replica-%c", 'a'+i))
		r.Addrs = append(r.Addrs, freeAddr(t))
		r.Admission = append(r.Admission, freeAddr(t))
	}
	front, err := StartBalancer(r.Admission...)
	if err != nil {
		t.Fatalf("starting the admission front: %v", err)
	}
	t.Cleanup(front.Close)
	r.Front = front
	return r
}

// Args are the flags of replica i but its gRPC --listen (Addrs[i], which
// each suite's broker starter sets): its identity, its admission listener
// and URL, the front's as the replicas' URL, and an election short enough
// for a test (a 3 s lease).
func (r *Replicas) Args(i int) []string {
	return []string{"--identity", r.IDs[i],
		"--admission-listen", r.Admission[i], "--admission-url", "https://" + r.Admission[i],
		"--admission-replicas-url", "https://" + r.Front.Addr(),
		"--leader-elect", "--leader-elect-lease-duration", "3s",
		"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms"}
}

// Index is the replica whose identity is id, -1 if none.
func (r *Replicas) Index(id string) int {
	for i, s := range r.IDs {
		if s == id {
			return i
		}
	}
	return -1
}

// LeaseHolder is the identity that holds the leader Lease in namespace, ""
// while none does.
func LeaseHolder(ctx context.Context, c kubernetes.Interface, namespace string) (string, error) {
	lease, err := c.CoordinationV1().Leases(namespace).Get(ctx, LeaderLease, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the leader Lease: %w", err)
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

// freeAddr is a loopback address no listener holds at the moment.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// AwaitLeader is the identity that holds the leader Lease in namespace,
// once one does (within a minute).
func AwaitLeader(t testing.TB, c kubernetes.Interface, namespace string) string {
	t.Helper()
	var leader string
	Eventually(t, time.Minute, "a replica to lead", func() bool {
		var err error
		leader, err = LeaseHolder(context.Background(), c, namespace)
		return err == nil && leader != ""
	})
	return leader
}
