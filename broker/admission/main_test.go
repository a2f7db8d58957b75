package admission

import (
	"crypto/x509"
	"net"
	"testing"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/kube/kubetest"
)

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: t.Output(), Level: hclog.Debug})
}

// testCerts are loaded certificates for 127.0.0.1, generated into a fake
// API server's Secret: the server tests need no real one.
func testCerts(t *testing.T) *certs.Serving {
	t.Helper()
	c, err := certs.New(certs.Options{Name: "admission", Client: kubetest.Wrap(fake.NewClientset()), Namespace: "tether-system",
		SecretName: "tether-admission-tls", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
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
