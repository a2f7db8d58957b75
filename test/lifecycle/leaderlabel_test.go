package lifecycle

import (
	"context"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestLeaderLabelMarksTheLeadersPod: the Service finds the leader by the
// label on its Pod. The leader's Pod carries it, the follower's does not
// (a stale label from a Pod that led before its restart is taken off), and
// after a graceful stop of the leader the label moves to the other Pod.
func TestLeaderLabelMarksTheLeadersPod(t *testing.T) {
	cp := controlplane.Get(t)
	brokerNS := cp.Namespace(t)
	kube := cp.Client()
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts(brokerNS).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ids := []string{"replica-a", "replica-b"}
	for _, id := range ids {
		// Stand-ins for the broker Pods: no node runs them, but their labels
		// are what the Service would select.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{broker.LeaderLabel: "true"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "broker", Image: "tether:dev"}}},
		}
		if _, err := kube.CoreV1().Pods(brokerNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labelled := func() map[string]bool {
		out := map[string]bool{}
		for _, id := range ids {
			p, err := kube.CoreV1().Pods(brokerNS).Get(ctx, id, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out[id] = p.Labels[broker.LeaderLabel] == "true"
		}
		return out
	}
	leaderOf := func() string {
		l, err := kube.CoordinationV1().Leases(brokerNS).Get(ctx, "tether-broker-leader", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	onlyLeaderLabelled := func(leader string) func() bool {
		return func() bool {
			got := labelled()
			for _, id := range ids {
				if got[id] != (id == leader) {
					return false
				}
			}
			return true
		}
	}

	election := []string{"--leader-elect", "--leader-elect-lease-duration", "3s",
		"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms"}
	brokers := map[string]*brokerProcess{}
	for _, id := range ids {
		brokers[id] = startBrokerProcess(t, cp, freeAddr(t), brokerNS,
			append([]string{"--identity", id, "--leader-elect-pod", id}, election...)...)
	}
	eventually(t, "a leader", func() bool { return leaderOf() != "" })
	first := leaderOf()
	eventually(t, "only the leader's Pod labelled", onlyLeaderLabelled(first))

	if err := brokers[first].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-brokers[first].done
	var second string
	eventually(t, "the other replica leading", func() bool {
		second = leaderOf()
		return second != "" && second != first
	})
	eventually(t, "the label moved to the new leader's Pod", onlyLeaderLabelled(second))
}
