package sdk_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tether-dev/tether/sdk"
)

type testPKI struct {
	server, client *tls.Config
}

// newTestPKI makes a self-signed certificate for name alone ("bufnet" in
// the tests that dial a bufconn), and a client config that trusts it.
func newTestPKI(t *testing.T, name string) testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return testPKI{
		server: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12},
		client: &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12},
	}
}

func TestTokenFileIsSentAsBearerAndReReadOnReconnect(t *testing.T) {
	pki := newTestPKI(t, "bufnet")
	hs := newHarness(t, nil).withTLS(pki.server)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := sdk.New("secret-ttl", hs.options(sdk.WithTLS(pki.client), sdk.WithTokenFile(tokenFile))...)
	h.OnCreate(configMaps, noop)
	hs.run(h)

	first := hs.session()
	if got := first.md.Get("authorization"); len(got) != 1 || got[0] != "Bearer first-token" {
		t.Fatalf("authorization = %q, want [Bearer first-token]", got)
	}
	if err := os.WriteFile(tokenFile, []byte("rotated-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	first.end <- status.Error(codes.Unavailable, "broker is moving")

	second := hs.session()
	if got := second.md.Get("authorization"); len(got) != 1 || got[0] != "Bearer rotated-token" {
		t.Fatalf("after reconnect authorization = %q, want [Bearer rotated-token]", got)
	}
}

func TestStaticTokenIsSent(t *testing.T) {
	pki := newTestPKI(t, "bufnet")
	hs := newHarness(t, nil).withTLS(pki.server)
	h := sdk.New("secret-ttl", hs.options(sdk.WithTLS(pki.client), sdk.WithToken("s3cret"))...)
	h.OnCreate(configMaps, noop)
	hs.run(h)
	if got := hs.session().md.Get("authorization"); len(got) != 1 || got[0] != "Bearer s3cret" {
		t.Fatalf("authorization = %q, want [Bearer s3cret]", got)
	}
}

func TestInsecureSendsNoToken(t *testing.T) {
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options(sdk.WithToken("s3cret"))...)
	h.OnCreate(configMaps, noop)
	hs.run(h)
	if got := hs.session().md.Get("authorization"); len(got) != 0 {
		t.Fatalf("authorization = %q over plain text, want none", got)
	}
}

func TestUnreadableTokenFileEndsRun(t *testing.T) {
	pki := newTestPKI(t, "bufnet")
	hs := newHarness(t, nil).withTLS(pki.server)
	missing := filepath.Join(t.TempDir(), "no-such-token")
	h := sdk.New("secret-ttl", hs.options(sdk.WithTLS(pki.client), sdk.WithTokenFile(missing))...)
	h.OnCreate(configMaps, noop)

	err := recv(t, hs.runErr(context.Background(), h), "Run to return")
	var rej *sdk.RejectedError
	if !errors.As(err, &rej) || rej.Code != codes.Unauthenticated.String() {
		t.Fatalf("Run() = %v, want a RejectedError with code Unauthenticated", err)
	}
	if !strings.Contains(err.Error(), "no-such-token") {
		t.Errorf("error %q does not name the token file", err)
	}
	if n := hs.broker.hellos.Load(); n != 0 {
		t.Errorf("broker saw %d Hellos, want 0", n)
	}
}

// TestCAFileReReadOnReconnect: the broker's CA bundle file is read at each
// connection attempt, so a handler whose mounted bundle now holds the
// broker's new CA trusts it at the next reconnect.
func TestCAFileReReadOnReconnect(t *testing.T) {
	a, b := newTestPKI(t, "bufnet"), newTestPKI(t, "bufnet")
	var served atomic.Pointer[tls.Certificate]
	served.Store(&a.server.Certificates[0])
	hs := newHarness(t, nil).withTLS(&tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return served.Load(), nil }})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	writeCA := func(p testPKI) {
		t.Helper()
		block := &pem.Block{Type: "CERTIFICATE", Bytes: p.server.Certificates[0].Certificate[0]}
		if err := os.WriteFile(caFile, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCA(a)
	h := sdk.New("secret-ttl", hs.options(sdk.WithTLS(&tls.Config{ServerName: "bufnet", MinVersion: tls.VersionTLS12}),
		sdk.WithTLSCAFile(caFile), sdk.WithToken("s3cret"))...)
	h.OnCreate(configMaps, noop)
	hs.run(h)
	first := hs.session()

	served.Store(&b.server.Certificates[0])
	writeCA(b)
	first.end <- status.Error(codes.Unavailable, "broker is moving")
	hs.session()
}
