package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/test/controlplane"
)

// testSecret is the Secret generated certificates are kept in.
const testSecret = "tether-test-tls"

// generatedCerts returns Certs that keep their Secret in ns, not loaded.
func generatedCerts(t *testing.T, client kubernetes.Interface, ns string, dns ...string) *Serving {
	t.Helper()
	c, err := New(Options{Name: "test", Client: kubetest.Wrap(client), Namespace: ns, SecretName: testSecret, DNSNames: dns, IPAddresses: testIPs,
		Log: testLogger(t), Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func getSecret(t *testing.T, client kubernetes.Interface, ns string) *corev1.Secret {
	t.Helper()
	return getSecretNamed(t, client, ns, testSecret)
}

// getCASecret is the Secret that keeps the CA apart from the serving key.
func getCASecret(t *testing.T, client kubernetes.Interface, ns string) *corev1.Secret {
	t.Helper()
	return getSecretNamed(t, client, ns, testSecret+CASecretSuffix)
}

func getSecretNamed(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.Secret {
	t.Helper()
	sec, err := client.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// serving is the leaf certificate c serves now.
func serving(t *testing.T, c *Serving) *x509.Certificate {
	t.Helper()
	cert, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf
}

// verify checks that c's serving certificate is valid for name under c's
// CA bundle.
func verify(t *testing.T, c *Serving, name string) {
	t.Helper()
	if _, err := serving(t, c).Verify(x509.VerifyOptions{DNSName: name, Roots: pool(t, c.CABundle())}); err != nil {
		t.Errorf("the serving certificate does not verify for %s: %v", name, err)
	}
}

func TestFirstLoadCreatesTheSecret(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	c := generatedCerts(t, cp.Client(), ns, "tether-broker."+ns+".svc")
	if _, err := c.GetCertificate(nil); err == nil {
		t.Error("GetCertificate before Load gave a certificate")
	}
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	sec := getSecret(t, cp.Client(), ns)
	if sec.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %q", sec.Type)
	}
	for _, k := range []string{SecretCACert, corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("the Secret has no %s", k)
		}
	}
	if _, ok := sec.Data[SecretCAKey]; ok {
		t.Error("the serving Secret holds the CA key")
	}
	caSec := getCASecret(t, cp.Client(), ns)
	if !bytes.Equal(caSec.Data[SecretCACert], sec.Data[SecretCACert]) || len(caSec.Data[SecretCAKey]) == 0 {
		t.Error("the CA Secret does not hold the CA of the bundle and its key")
	}
	if !bytes.Equal(c.CABundle(), sec.Data[SecretCACert]) {
		t.Error("CABundle is not the Secret's ca.crt")
	}
	leaf := serving(t, c)
	if !bytes.Equal(leaf.Raw, mustParse(t, sec.Data[corev1.TLSCertKey]).Raw) {
		t.Error("the serving certificate is not the Secret's tls.crt")
	}
	if d := time.Until(leaf.NotAfter); d < DefaultValidity-time.Hour || d > DefaultValidity {
		t.Errorf("the serving certificate is valid for %v more, want about %v", d, DefaultValidity)
	}
	verify(t, c, "tether-broker."+ns+".svc")
	verify(t, c, "127.0.0.1")
	select {
	case <-c.Changed():
		t.Error("the first Load signalled a change")
	default:
	}
}

func TestReplicasShareOneCA(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	replicas := make([]*Serving, 4)
	errs := make([]error, len(replicas))
	var wg sync.WaitGroup
	for i := range replicas {
		replicas[i] = generatedCerts(t, cp.Client(), ns, "tether-broker."+ns+".svc")
		wg.Go(func() { errs[i] = replicas[i].Load(t.Context()) })
	}
	wg.Wait()
	want := getSecret(t, cp.Client(), ns)
	for i, c := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if !bytes.Equal(c.CABundle(), want.Data[SecretCACert]) {
			t.Errorf("replica %d has another CA than the Secret's", i)
		}
		if !bytes.Equal(serving(t, c).Raw, mustParse(t, want.Data[corev1.TLSCertKey]).Raw) {
			t.Errorf("replica %d serves another certificate than the Secret's", i)
		}
	}
	// A restart takes what is there.
	again := generatedCerts(t, cp.Client(), ns, "tether-broker."+ns+".svc")
	if err := again.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rv := getSecret(t, cp.Client(), ns).ResourceVersion; rv != want.ResourceVersion {
		t.Errorf("a restart wrote the Secret (resourceVersion %s, was %s)", rv, want.ResourceVersion)
	}
	if !bytes.Equal(again.CABundle(), want.Data[SecretCACert]) {
		t.Error("a restart has another CA")
	}
}

func TestWornOutServingCertRenewedOnSameCA(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	c := generatedCerts(t, cp.Client(), ns, "tether-broker."+ns+".svc")
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})

	// Another replica left a certificate with ten minutes of its hour left.
	sec := getSecret(t, cp.Client(), ns)
	caSec := getCASecret(t, cp.Client(), ns)
	ca, err := parseKeyPair(caSec.Data[SecretCACert], caSec.Data[SecretCAKey])
	if err != nil {
		t.Fatal(err)
	}
	old, err := newServing("test", ca, []string{"tether-broker." + ns + ".svc"}, testIPs, time.Now().Add(-50*time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey] = old.certPEM, old.keyPEM
	if _, err := cp.Client().CoreV1().Secrets(ns).Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	eventually(t, "the worn-out certificate is renewed and served", func(ctx context.Context) (bool, error) {
		now := getSecret(t, cp.Client(), ns)
		leaf := mustParse(t, now.Data[corev1.TLSCertKey])
		return time.Until(leaf.NotAfter) > DefaultValidity-time.Hour && bytes.Equal(serving(t, c).Raw, leaf.Raw), nil
	})
	if now := getSecret(t, cp.Client(), ns); !bytes.Equal(now.Data[SecretCACert], sec.Data[SecretCACert]) || !bytes.Equal(c.CABundle(), sec.Data[SecretCACert]) {
		t.Error("renewing the serving certificate changed the CA")
	}
	verify(t, c, "tether-broker."+ns+".svc")
	select {
	case <-c.Changed():
		t.Error("Changed signalled, but the CA bundle is the same")
	default:
	}
}

func TestNewNamesRenewTheCertKeepingTheOld(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	first := generatedCerts(t, cp.Client(), ns, "old.example.test")
	if err := first.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	second := generatedCerts(t, cp.Client(), ns, "new.example.test")
	if err := second.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.CABundle(), second.CABundle()) {
		t.Error("new names changed the CA")
	}
	verify(t, second, "new.example.test")
	verify(t, second, "old.example.test")
	// The first replica is content with the union: no more writes.
	rv := getSecret(t, cp.Client(), ns).ResourceVersion
	if err := first.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if now := getSecret(t, cp.Client(), ns).ResourceVersion; now != rv {
		t.Errorf("the replica with the old names wrote the Secret again")
	}
}

func TestBrokenCAReplaced(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	c := generatedCerts(t, cp.Client(), ns, "tether-broker."+ns+".svc")
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	sec := getCASecret(t, cp.Client(), ns)
	sec.Data[SecretCAKey] = []byte("garbage")
	if _, err := cp.Client().CoreV1().Secrets(ns).Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := c.CABundle()
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, c.CABundle()) {
		t.Fatal("the CA was kept")
	}
	select {
	case <-c.Changed():
	default:
		t.Error("a new CA did not signal Changed")
	}
	verify(t, c, "127.0.0.1")
}

func TestGivenFilesUsedAndReloaded(t *testing.T) {
	dir := t.TempDir()
	f := writeCertFiles(t, dir)
	c, err := New(Options{CertFile: f.certFile, KeyFile: f.keyFile, CAFile: f.caFile,
		Log: testLogger(t), Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(serving(t, c).Raw, f.srv.leaf().Raw) || !bytes.Equal(c.CABundle(), f.ca.certPEM) {
		t.Fatal("the given files are not what is served")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})

	// cert-manager renews: new files, a new CA too.
	g := writeCertFiles(t, dir)
	later := time.Now().Add(time.Minute)
	for _, p := range []string{g.certFile, g.keyFile, g.caFile} {
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the new files are served", func(context.Context) (bool, error) {
		return bytes.Equal(serving(t, c).Raw, g.srv.leaf().Raw), nil
	})
	if !bytes.Equal(c.CABundle(), g.ca.certPEM) {
		t.Error("the new CA file is not the bundle")
	}
	select {
	case <-c.Changed():
	case <-time.After(5 * time.Second):
		t.Error("a new CA file did not signal Changed")
	}
}

func TestOptionsAreChecked(t *testing.T) {
	client := &kubernetes.Clientset{}
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"cert without key", Options{CertFile: "tls.crt"}, "both a certificate file and a key file"},
		{"CA alone", Options{CAFile: "ca.crt", Client: kubetest.Wrap(client), Namespace: "ns", SecretName: "s"}, "a CA file is only for a given certificate"},
		{"no client", Options{Namespace: "ns", SecretName: "s", DNSNames: testDNS}, "needs a Kubernetes client, and a namespace and a name for their Secret"},
		{"no names", Options{Client: kubetest.Wrap(client), Namespace: "ns", SecretName: "s"}, "at least one DNS name or IP address"},
		{"CA shorter than cert", Options{Client: kubetest.Wrap(client), Namespace: "ns", SecretName: "s", DNSNames: testDNS, CAValidity: time.Hour}, "shorter than the serving certificate's"},
	} {
		if _, err := New(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// TestTLSDialVerifiesTheServer is what a client does (the API server
// calling a webhook, a handler dialling the broker): dial with the CA
// bundle as its roots.
func TestTLSDialVerifiesTheServer(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	c := generatedCerts(t, cp.Client(), ns, "tether-broker."+ns+".svc")
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	roots := pool(t, c.CABundle())
	for _, tc := range []struct {
		serverName string
		ok         bool
	}{
		{"", true}, // the IP address dialled
		{"tether-broker." + ns + ".svc", true},
		{"elsewhere.example.test", false},
	} {
		conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: tc.serverName, MinVersion: tls.VersionTLS12})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("dialling as %q: %v, want success %v", tc.serverName, err, tc.ok)
		}
	}
}

func mustParse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("no PEM in %q", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parsing a certificate: %v", err)
	}
	return cert
}

// TestNamespaceBeingDeletedStillServes: when the broker's namespace is
// being deleted (an uninstall by namespace deletion), its Secret may be
// gone and no new one can be made; a broker restarted then must still
// serve, to release its holds, so the certificate it generates is kept in
// memory.
func TestNamespaceBeingDeletedStillServes(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	// No namespace controller runs here: a deleted namespace stays
	// Terminating, which is the moment this is about.
	if err := cp.Client().CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c := generatedCerts(t, cp.Client(), ns, "tether-broker."+ns+".svc")
	if err := c.Load(t.Context()); err != nil {
		t.Fatalf("Load in a namespace being deleted: %v", err)
	}
	verify(t, c, "tether-broker."+ns+".svc")
	served := serving(t, c)
	if err := c.refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !serving(t, c).Equal(served) {
		t.Error("a refresh in a namespace being deleted replaced the certificate kept in memory")
	}
}
