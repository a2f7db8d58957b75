package certs

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tether-dev/tether/test/controlplane"
)

// The certificate tests use the real API server.
func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: t.Output(), Level: hclog.Debug})
}

// eventually polls cond until it holds or 15 seconds pass.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, cond); err != nil {
		t.Fatalf("waiting until %s: %v", what, err)
	}
}

// testNames are the names the test certificates serve.
var (
	testDNS = []string{"broker.tether.test"}
	testIPs = []net.IP{net.IPv4(127, 0, 0, 1)}
)

// certFiles are a CA and a serving certificate written to files.
type certFiles struct {
	ca, srv                   keyPair
	certFile, keyFile, caFile string
}

// writeCertFiles makes a CA and a serving certificate for testDNS and
// testIPs and writes them to dir (overwriting earlier ones).
func writeCertFiles(t *testing.T, dir string) certFiles {
	t.Helper()
	ca, err := newCA("test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServing("test", ca, testDNS, testIPs, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := certFiles{ca: ca, srv: srv, certFile: filepath.Join(dir, "tls.crt"),
		keyFile: filepath.Join(dir, "tls.key"), caFile: filepath.Join(dir, "ca.crt")}
	for path, data := range map[string][]byte{f.certFile: srv.certPEM, f.keyFile: srv.keyPEM, f.caFile: ca.certPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// fileCerts returns a loaded Serving of given files.
func fileCerts(t *testing.T) (*Serving, certFiles) {
	t.Helper()
	f := writeCertFiles(t, t.TempDir())
	c, err := New(Options{CertFile: f.certFile, KeyFile: f.keyFile, CAFile: f.caFile, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c, f
}

// pool is a cert pool of a PEM bundle.
func pool(t *testing.T, bundle []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(bundle) {
		t.Fatalf("no certificate in the CA bundle %q", bundle)
	}
	return p
}
