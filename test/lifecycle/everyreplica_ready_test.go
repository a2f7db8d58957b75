package lifecycle

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// TestAStartingReplicaIsReadyOnlyOnceTheHandlersOnEveryReplicaAreThere: a
// handler with a review binding keeps a session to every replica, and its
// webhook points at every ready one. A replica that starts reports ready
// only once the handler has a session to it too: ready before, it would be
// sent reviews with no instance to answer them (in a cluster, the
// replacement of a deleted Pod, found by the SDKs only at their next look
// at the Service's addresses). The handler's way to the new replica is a
// door the test opens once it has seen the replica wait.
func TestAStartingReplicaIsReadyOnlyOnceTheHandlersOnEveryReplicaAreThere(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	brokerNS := cp.Namespace(t) // never sent to a webhook
	rs := testenv.NewReplicas(t, 2)
	startBrokerProcess(t, cp, rs.Addrs[0], brokerNS, rs.Args(0)...)
	door := newDoor(t, rs.Addrs[1])

	h := sdk.New("readygate", append(handlerOpts(t), sdk.WithDialer(sdk.RoundRobin(rs.Addrs[0], door.addr())))...)
	h.OnValidate(widgets, func(context.Context, *sdk.Review) error { return nil }, sdk.Namespaces(ns))
	runHandler(t, h, rs.Addrs[0])
	eventually(t, "the handler's webhook to point at every replica", func() bool {
		c, err := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(),
			"tether-readygate", metav1.GetOptions{})
		return err == nil && len(c.Webhooks) > 0 && c.Webhooks[0].ClientConfig.URL != nil &&
			strings.HasPrefix(*c.Webhooks[0].ClientConfig.URL, "https://"+rs.Front.Addr()+"/")
	})

	metricsAddr := freeAddr(t)
	// A wait longer than the test's: the replica must be ready because the
	// handler came, not because the wait ran out.
	startBrokerProcess(t, cp, rs.Addrs[1], brokerNS, append(rs.Args(1), "--metrics-listen", metricsAddr, "--admission-ready-wait", "10m")...)
	readyz := "http://" + metricsAddr + "/readyz"
	eventually(t, "the new replica to wait for the handler", func() bool {
		code, body := get200(readyz)
		if code == http.StatusOK {
			t.Fatalf("the new replica is ready with no session of handler readygate to it")
		}
		return strings.Contains(body, "handler readygate")
	})
	door.open()
	eventually(t, "the new replica ready once the handler signed in to it", func() bool {
		code, _ := get200(readyz)
		return code == http.StatusOK
	})
}

// get200 is the status and body of a GET of url; 0 when it cannot be had.
func get200(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// door is a loopback port in front of a broker that, until opened, closes
// every connection it accepts (the replica not yet found), then pipes each
// to the broker.
type door struct {
	lis    net.Listener
	to     string
	mu     sync.Mutex
	opened bool
	wg     sync.WaitGroup
}

func newDoor(t *testing.T, to string) *door {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &door{lis: lis, to: to}
	d.wg.Add(1)
	go d.serve()
	t.Cleanup(func() {
		lis.Close()
		d.wg.Wait()
	})
	return d
}

func (d *door) addr() string { return d.lis.Addr().String() }

func (d *door) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.opened = true
}

func (d *door) serve() {
	defer d.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for {
		in, err := d.lis.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		opened := d.opened
		d.mu.Unlock()
		if !opened {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", d.to)
		if err != nil {
			in.Close()
			continue
		}
		open = append(open, in, out)
		conns.Add(2)
		go func() { defer conns.Done(); _, _ = io.Copy(out, in); out.Close() }()
		go func() { defer conns.Done(); _, _ = io.Copy(in, out); in.Close() }()
	}
}
