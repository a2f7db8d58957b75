package relay

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testName is the DNS name of the test certificates, as a Service's.
const testName = "broker.tether.test"

// testCA is a CA that signs serving certificates for testName.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	serial int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue makes a serving certificate for testName: each has a serial of its
// own, by which a client tells who served it.
func (ca *testCA) issue(t *testing.T) CertPEM {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: testName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{testName}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return CertPEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CA:   ca.pem,
	}
}

// serial is the serial number of c's certificate.
func serial(t *testing.T, c CertPEM) int64 {
	t.Helper()
	kp, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return kp.Leaf.SerialNumber.Int64()
}

// fakeCerts is a CertSource a test fills in; empty, it has no certificate.
type fakeCerts struct {
	mu sync.Mutex
	c  CertPEM
}

func (f *fakeCerts) set(c CertPEM) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c = c
}

func (f *fakeCerts) Load(context.Context) (CertPEM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c.Cert == nil {
		return CertPEM{}, fmt.Errorf("fake: %w", ErrNoCert)
	}
	return f.c, nil
}

// tlsConfig serves c.
func tlsConfig(t *testing.T, c CertPEM) *tls.Config {
	t.Helper()
	kp, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{kp}, NextProtos: []string{"h2", "http/1.1"}}
}

// broker is a stand-in of a broker's admission listener: HTTPS with a
// certificate of the test CA, HTTP/1.1 and h2, answering each request
// with handle. It counts the requests it read.
type broker struct {
	addr     string
	lis      net.Listener
	requests atomic.Int32
	srv      *http.Server
}

func newBroker(t *testing.T, c CertPEM, handle http.HandlerFunc) *broker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{addr: lis.Addr().String(), lis: lis}
	b.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.requests.Add(1)
			handle(w, r)
		}),
		TLSConfig: tlsConfig(t, c),
		ErrorLog:  nil,
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = b.srv.ServeTLS(lis, "", "") }()
	t.Cleanup(func() { b.srv.Close(); <-done })
	return b
}

// echo answers 200 with name and what it got.
func echo(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Broker", name)
		fmt.Fprintf(w, "%s %s %s %s %s%s %s", name, r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type"), r.Header.Get("X-End-To-End"),
			r.Header.Get("X-Hop"), body) // X-Hop is a hop's header: not passed on
	}
}

// failing answers with code.
func failing(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		http.Error(w, "broker error", code)
	}
}

// dying reads each request whole and closes the connection without an
// answer, as a broker SIGKILLed under way does. Raw TLS with HTTP/1.1: a
// closed connection, not an HTTP/2 stream reset.
func dying(t *testing.T, c CertPEM) *server {
	cfg := tlsConfig(t, c)
	cfg.NextProtos = []string{"http/1.1"}
	s := newServer(t, func(conn net.Conn) {
		defer conn.Close()
		tc := tls.Server(conn, cfg)
		req, err := http.ReadRequest(bufio.NewReader(tc))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
	})
	return s
}

// client is an HTTPS client that trusts the test CA, over HTTP/1.1 or h2.
func client(t *testing.T, ca []byte, h2 bool) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: testName}}
	if h2 {
		tr.ForceAttemptHTTP2 = true
	} else {
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// lockedBuffer is a log output tests read while the relay writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
