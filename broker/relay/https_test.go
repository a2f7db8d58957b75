package relay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/test/testenv"
)

// httpsRelay starts a relay that has cert from the start, to local and
// peers, and waits until it serves HTTPS.
func httpsRelay(t *testing.T, cert CertPEM, local string, peers Peers, opts Options) *Relay {
	t.Helper()
	certs := &fakeCerts{}
	certs.set(cert)
	opts.Certs, opts.Local, opts.Peers = certs, local, peers
	r, _ := runRelay(t, opts)
	testenv.Eventually(t, 10*time.Second, "the relay serving HTTPS", func() bool { return r.tls.Load() != nil })
	return r
}

// post sends a review-like request through the relay at addr.
func post(t *testing.T, c *http.Client, addr string, body []byte) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://"+addr+"/admit/h/b/sig?timeout=10s", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-End-To-End", "kept")
	if !c.Transport.(*http.Transport).ForceAttemptHTTP2 { // HTTP/2 has no Connection header
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "dropped")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(got)
}

func TestHTTPSPassesTheRequestAndTheAnswerOn(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t)
	local := newBroker(t, ca.issue(t), echo("local"))
	r := httpsRelay(t, cert, local.addr, nil, Options{})
	for _, h2 := range []bool{false, true} {
		resp, got := post(t, client(t, ca.pem, h2), r.Addr().String(), []byte(`{"review":1}`))
		want := `local POST /admit/h/b/sig?timeout=10s application/json kept {"review":1}`
		if resp.StatusCode != http.StatusOK || got != want || resp.Header.Get("X-Broker") != "local" {
			t.Errorf("h2 %v: %d %q (X-Broker %q), want 200 %q from the local broker", h2, resp.StatusCode, got, resp.Header.Get("X-Broker"), want)
		}
		// The relay serves the Secret's certificate, not the broker's.
		if s := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); s != serial(t, cert) {
			t.Errorf("h2 %v: served the certificate of serial %d, want the Secret's %d", h2, s, serial(t, cert))
		}
		if h2 != (resp.ProtoMajor == 2) {
			t.Errorf("h2 %v: answered over %s", h2, resp.Proto)
		}
	}
}

// TestHTTPSResendsARequestNoBrokerAnswered: a request the local broker did
// not answer is sent to a peer; an answer, whatever its status, is not.
func TestHTTPSResendsARequestNoBrokerAnswered(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t)
	for _, tc := range []struct {
		name       string
		local      func(t *testing.T) string
		peerStatus int // 0: the peer refuses too
		wantStatus int
		wantBody   string
		resent     bool
	}{
		{"the local broker reads the request and dies", func(t *testing.T) string { return dying(t, ca.issue(t)).addr() },
			http.StatusOK, http.StatusOK, "peer", true},
		{"the local broker refuses", refusing, http.StatusOK, http.StatusOK, "peer", true},
		{"the local broker's certificate is not the CA's", func(t *testing.T) string {
			return newBroker(t, newTestCA(t).issue(t), echo("local")).addr
		}, http.StatusOK, http.StatusOK, "peer", true},
		{"the local broker answers 500", func(t *testing.T) string { return newBroker(t, ca.issue(t), failing(500)).addr },
			http.StatusOK, http.StatusInternalServerError, "broker error", false},
		{"the local broker answers 503", func(t *testing.T) string { return newBroker(t, ca.issue(t), failing(503)).addr },
			http.StatusOK, http.StatusServiceUnavailable, "broker error", false},
		{"no broker answers", refusing, 0, http.StatusBadGateway, "no broker answered", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := newBroker(t, ca.issue(t), echo("peer"))
			peers := fakePeers{refusing(t), peer.addr}
			if tc.peerStatus == 0 {
				peers = fakePeers{refusing(t), dying(t, ca.issue(t)).addr()}
			}
			logs := &lockedBuffer{}
			r := httpsRelay(t, cert, tc.local(t), peers, Options{Log: hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, t.Output()), Level: hclog.Debug})})
			for _, h2 := range []bool{false, true} {
				resp, got := post(t, client(t, ca.pem, h2), r.Addr().String(), []byte(`{"review":1}`))
				if resp.StatusCode != tc.wantStatus || !strings.HasPrefix(got, tc.wantBody) {
					t.Errorf("h2 %v: %d %q, want %d %q...", h2, resp.StatusCode, got, tc.wantStatus, tc.wantBody)
				}
			}
			if n := strings.Count(logs.String(), "resent it to another replica"); tc.resent && n != 2 {
				t.Errorf("%d resends logged, want 2", n)
			}
			if !tc.resent && tc.peerStatus != 0 && peer.requests.Load() != 0 {
				t.Errorf("the peer got %d requests, want none: the local broker answered", peer.requests.Load())
			}
		})
	}
}

func TestHTTPSAnswers413ToABodyOverTheLimit(t *testing.T) {
	ca := newTestCA(t)
	local := newBroker(t, ca.issue(t), echo("local"))
	r := httpsRelay(t, ca.issue(t), local.addr, nil, Options{MaxBodyBytes: 1024})
	c := client(t, ca.pem, false)
	if resp, got := post(t, c, r.Addr().String(), bytes.Repeat([]byte("x"), 1025)); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of 1025 bytes: %d %q, want 413", resp.StatusCode, got)
	}
	if n := local.requests.Load(); n != 0 {
		t.Errorf("the local broker got %d requests, want none", n)
	}
	if resp, _ := post(t, c, r.Addr().String(), bytes.Repeat([]byte("x"), 1024)); resp.StatusCode != http.StatusOK {
		t.Errorf("a body of 1024 bytes: %d, want 200", resp.StatusCode)
	}
}

// TestRelaysBytesUntilACertificateIsHad: without a certificate, TLS
// stays end to end (the client sees the broker's certificate); once the
// Secret has one, new connections are the relay's (the Secret's
// certificate), and a rotation is served to the next ones.
func TestRelaysBytesUntilACertificateIsHad(t *testing.T) {
	ca := newTestCA(t)
	brokerCert, first, second := ca.issue(t), ca.issue(t), ca.issue(t)
	local := newBroker(t, brokerCert, echo("local"))
	certs := &fakeCerts{}
	r, _ := runRelay(t, Options{Local: local.addr, Certs: certs, CertRetry: 10 * time.Millisecond, CertRefresh: 10 * time.Millisecond})
	servedBy := func() int64 {
		t.Helper()
		c := client(t, ca.pem, false)
		c.Transport.(*http.Transport).DisableKeepAlives = true
		resp, got := post(t, c, r.Addr().String(), nil)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(got, "local") {
			t.Fatalf("%d %q, want the local broker's answer", resp.StatusCode, got)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if s := servedBy(); s != serial(t, brokerCert) {
		t.Fatalf("without a certificate, served serial %d, want the broker's %d", s, serial(t, brokerCert))
	}
	for _, c := range []CertPEM{first, second} {
		certs.set(c)
		testenv.Eventually(t, 10*time.Second, "the relay serving the Secret's certificate", func() bool { return servedBy() == serial(t, c) })
	}
}

// TestHTTPSDrains: in HTTPS mode too, the relay accepts for Drain after
// its context ends, sending to a peer once the local broker refuses, and
// returns once the requests under way are answered.
func TestHTTPSDrains(t *testing.T) {
	ca := newTestCA(t)
	release, got := make(chan struct{}), make(chan struct{})
	local := newBroker(t, ca.issue(t), func(w http.ResponseWriter, r *http.Request) {
		close(got)
		<-release
		echo("local")(w, r)
	})
	peer := newBroker(t, ca.issue(t), echo("peer"))
	certs := &fakeCerts{}
	certs.set(ca.issue(t))
	r := New(Options{Listen: "127.0.0.1:0", Local: local.addr, Peers: fakePeers{peer.addr}, Certs: certs, Drain: time.Hour,
		Log: hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: t.Output(), Level: hclog.Debug})})
	if err := r.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	testenv.Eventually(t, 10*time.Second, "the relay serving HTTPS", func() bool { return r.tls.Load() != nil })
	addr := r.Addr().String()
	underWay := make(chan string, 1)
	c := client(t, ca.pem, true)
	go func() { // not post: t.Fatal belongs to the test's goroutine
		resp, err := c.Post("https://"+addr+"/admit/h/b/sig", "application/json", nil)
		if err != nil {
			underWay <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		underWay <- fmt.Sprint(string(body), err)
	}()
	<-got
	cancel()
	local.lis.Close() // the broker stops accepting; its request goes on
	for range 3 {
		c := client(t, ca.pem, false)
		c.Transport.(*http.Transport).DisableKeepAlives = true
		if _, body := post(t, c, addr, nil); !strings.HasPrefix(body, "peer") {
			t.Fatalf("answered %q while draining, want the peer", body)
		}
	}
	r.lis.Close() // ends the drain early, as an accept error does
	select {
	case err := <-done:
		t.Fatalf("the relay returned (%v) with a request under way", err)
	default:
	}
	close(release)
	if body := <-underWay; !strings.HasPrefix(body, "local") {
		t.Fatalf("the request under way was answered %q, want the local broker's answer", body)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not return within 10s of the last answer")
	}
}
