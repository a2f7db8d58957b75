package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// TestUninstallFitsTheTerminationGrace measures an uninstall with many
// holds, from the Deployment's deletion to the broker's exit, against the
// Pod's termination grace period in deploy/ (120 s). It takes minutes to
// set up, so it runs only when asked:
//
//	TETHER_UNINSTALL_HOLDS=10000 go test -run TestUninstallFitsTheTerminationGrace -v -timeout 20m ./test/lifecycle
func TestUninstallFitsTheTerminationGrace(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TETHER_UNINSTALL_HOLDS"))
	if n <= 0 {
		t.Skip("set TETHER_UNINSTALL_HOLDS=N to measure an uninstall of N holds")
	}
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	testenv.CreateBrokerDeployment(t, cp.Client(), brokerNS, "tether-broker")
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, brokerNS, "--deployment", "tether-broker", "--log-level", "warn")
	startHandlerProcess(t, addr, "many", ns)
	t.Logf("creating %d widgets and waiting for their holds (writes are paced at 100/s)", n)
	for i := range n {
		create(t, dyn, widgetGVR, widget(ns, fmt.Sprintf("w%05d", i), map[string]any{"size": int64(1)}))
	}
	testenv.Eventually(t, 5*time.Minute, "all held", func() bool {
		l, err := dyn.Resource(widgetGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		c := 0
		for i := range l.Items {
			if hold.Has(&l.Items[i], "many") {
				c++
			}
		}
		return c == n
	})
	start := time.Now()
	if err := cp.Client().AppsV1().Deployments(brokerNS).Delete(context.Background(), "tether-broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	<-b.done
	took := time.Since(start)
	t.Logf("uninstall of %d holds: the broker exited %v after its Deployment was deleted", n, took.Round(time.Millisecond))
	if took > terminationGrace {
		t.Errorf("took %v, more than the termination grace period of %v", took, terminationGrace)
	}
	l, err := dyn.Resource(widgetGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range l.Items {
		if hold.Has(&l.Items[i], "many") {
			t.Fatalf("%s still held after the uninstall", l.Items[i].GetName())
		}
	}
}

// terminationGrace is terminationGracePeriodSeconds of deploy/broker.
const terminationGrace = 120 * time.Second
