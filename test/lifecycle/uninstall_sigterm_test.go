package lifecycle

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// apiProxy puts a toxiproxy proxy between a process and the API server
// until the test ends, and returns it with a kubeconfig that goes through
// it.
func apiProxy(t *testing.T, cp *controlplane.ControlPlane) (*toxiproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(cp.URL())
	if err != nil {
		t.Fatal(err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	p := toxiproxy.NewProxy(srv, "kube-apiserver", "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	data, err := os.ReadFile(cp.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	// The API server's certificate is for 127.0.0.1, whatever the port.
	proxied := strings.ReplaceAll(string(data), cp.URL(), "https://"+p.Listen)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(proxied), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, path
}

// TestSigtermBeforeTheWatchStillUninstalls: `kubectl delete` of the
// broker's Deployment reaches the broker as a SIGTERM, which may come
// before its watch shows the Deployment gone (here the API server's answers
// reach the broker 3 s late, through toxiproxy). The broker must still see
// that it is being uninstalled, and release its holds, rather than stop as
// for a restart.
func TestSigtermBeforeTheWatchStillUninstalls(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	testenv.CreateBrokerDeployment(t, cp.Client(), brokerNS, "tether-broker")
	proxy, kubeconfig := apiProxy(t, cp)
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, brokerNS, "--deployment", "tether-broker", "--kubeconfig", kubeconfig)
	startHandlerProcess(t, addr, "terminated", ns)
	createHeld(t, cp, ns, "terminated", "w")
	eventually(t, "the broker to watch its Deployment", func() bool {
		return b.out.Any(func(l string) bool { return strings.Contains(l, "watching the broker's Deployment") })
	})

	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":3000}}`)); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client().AppsV1().Deployments(brokerNS).Delete(context.Background(), "tether-broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sigtermReleases(t, b, dyn, ns, "terminated")
}

// sigtermReleases sends b SIGTERM, waits for it to exit and requires that
// the handler's hold on ns/w is gone: the broker uninstalled.
func sigtermReleases(t *testing.T, b *brokerProcess, dyn dynamic.Interface, ns, handler string) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(2 * waitTimeout):
		t.Fatal("the broker did not exit after SIGTERM")
	}
	if obj := get(t, dyn, widgetGVR, ns, "w"); hold.Has(obj, handler) {
		t.Errorf("the hold stayed: the broker stopped as for a restart, not an uninstall (finalizers %v)", obj.GetFinalizers())
	}
}

// TestSigtermInANamespaceBeingDeletedUninstalls: a namespace deletion
// deletes the broker's Pods, often before its Deployment, so the SIGTERM
// comes while the Deployment stands. The namespace being deleted is an
// uninstall all the same (rule 3f). On a real node the broker stopped as for
// a restart there and every hold stayed (test/incluster).
func TestSigtermInANamespaceBeingDeletedUninstalls(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	testenv.CreateBrokerDeployment(t, cp.Client(), brokerNS, "tether-broker")
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, brokerNS, "--deployment", "tether-broker")
	startHandlerProcess(t, addr, "evicted", ns)
	createHeld(t, cp, ns, "evicted", "w")
	eventually(t, "the broker to watch its Deployment", func() bool {
		return b.out.Any(func(l string) bool { return strings.Contains(l, "watching the broker's Deployment") })
	})

	// No controller manager runs here: the namespace stays Terminating with
	// the Deployment in it, as in the moment a real one deletes the Pods.
	if err := cp.Client().CoreV1().Namespaces().Delete(context.Background(), brokerNS, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sigtermReleases(t, b, dyn, ns, "evicted")
}
