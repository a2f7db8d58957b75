package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CertPEM is the admission serving certificate every replica serves, as
// the Secret the broker writes holds it: the certificate (tls.crt), its
// key (tls.key) and the CA bundle that verifies it (ca.crt).
type CertPEM struct {
	Cert, Key, CA []byte
}

// ErrNoCert is what a CertSource's Load wraps while there is no
// certificate yet (the broker has not written the Secret).
var ErrNoCert = errors.New("no admission certificate yet")

// CertSource reads the admission serving certificate.
type CertSource interface {
	Load(ctx context.Context) (CertPEM, error)
}

// SecretGetter reads Secrets of one namespace, as kube.Resource and
// client-go's typed clients do.
type SecretGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
}

// SecretSource reads the certificate from the Secret Name, as package
// broker/certs writes it (keys tls.crt, tls.key and ca.crt), or as
// cert-manager does.
type SecretSource struct {
	Secrets SecretGetter
	Name    string
}

// Load reads the Secret now.
func (s SecretSource) Load(ctx context.Context) (CertPEM, error) {
	sec, err := s.Secrets.Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return CertPEM{}, fmt.Errorf("the Secret %s: %w", s.Name, ErrNoCert)
	}
	if err != nil {
		return CertPEM{}, fmt.Errorf("reading the Secret %s: %w", s.Name, err)
	}
	c := CertPEM{Cert: sec.Data[corev1.TLSCertKey], Key: sec.Data[corev1.TLSPrivateKeyKey], CA: sec.Data["ca.crt"]}
	if len(c.Cert) == 0 || len(c.Key) == 0 || len(c.CA) == 0 {
		return CertPEM{}, fmt.Errorf("the Secret %s lacks tls.crt, tls.key or ca.crt: %w", s.Name, ErrNoCert)
	}
	return c, nil
}

// tlsState is what HTTPS mode needs from one certificate: what the relay
// serves, and a transport to the brokers that trusts what they serve.
type tlsState struct {
	pem        CertPEM
	cert       *tls.Certificate
	serverName string
	transport  *http.Transport
}

// newTLSState parses c. The brokers are reached by address, so their
// certificate is verified for serverName, else for the certificate's
// first DNS name: every replica serves the same one.
func newTLSState(c CertPEM, serverName string, dialTimeout time.Duration) (*tlsState, error) {
	kp, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("parsing the admission certificate and key: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return nil, errors.New("the admission CA bundle has no PEM certificate")
	}
	if serverName == "" {
		if len(kp.Leaf.DNSNames) == 0 {
			return nil, errors.New("the admission certificate names no DNS name to verify the brokers' with")
		}
		serverName = kp.Leaf.DNSNames[0]
	}
	tr := &http.Transport{
		Proxy:       nil, // the brokers are in the Pod's network: never through $HTTPS_PROXY
		DialContext: (&net.Dialer{Timeout: dialTimeout}).DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			RootCAs:    pool,
			ServerName: serverName,
		},
		TLSHandshakeTimeout: dialTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		// Below the broker's own idle timeout (90 s), so that the relay
		// does not send a request on a connection the broker is closing.
		IdleConnTimeout: 30 * time.Second,
	}
	return &tlsState{pem: c, cert: &kp, serverName: serverName, transport: tr}, nil
}

// same says whether c is what s was made of.
func (s *tlsState) same(c CertPEM) bool {
	return bytes.Equal(s.pem.Cert, c.Cert) && bytes.Equal(s.pem.Key, c.Key) && bytes.Equal(s.pem.CA, c.CA)
}

// watchCerts loads the certificate at once, again every CertRetry while
// there is none, then every CertRefresh, until ctx ends.
func (r *Relay) watchCerts(ctx context.Context) {
	for {
		r.loadCert(ctx)
		wait := r.opts.CertRefresh
		if r.tls.Load() == nil {
			wait = r.opts.CertRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(wait):
		}
	}
}

// loadCert reads the certificate and switches to it when it changed. A
// failure keeps what was had: TCP mode when nothing, else the last
// certificate, which a rotation leaves valid for a long while yet.
func (r *Relay) loadCert(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, r.opts.CertRetry)
	c, err := r.opts.Certs.Load(lctx)
	cancel()
	old := r.tls.Load()
	switch {
	case ctx.Err() != nil:
		return
	case errors.Is(err, ErrNoCert) && old == nil:
		r.log.Debug("no admission certificate yet: relaying connections byte for byte", "reason", err.Error())
		return
	case err != nil:
		r.log.Warn("could not read the admission certificate", "error", err, "https", old != nil)
		return
	case old != nil && old.same(c):
		return
	}
	st, err := newTLSState(c, r.opts.ServerName, r.opts.DialTimeout)
	if err != nil {
		r.log.Warn("the admission certificate is unusable", "error", err, "https", old != nil)
		return
	}
	r.mu.Lock()
	r.transports = append(r.transports, st.transport)
	r.mu.Unlock()
	r.tls.Store(st)
	if old == nil {
		r.log.Info("relaying admission requests over HTTPS: a request the local broker does not answer is resent to another replica",
			"server_name", st.serverName, "not_after", st.cert.Leaf.NotAfter)
		return
	}
	// Requests under way finish on the old transport; its idle
	// connections go.
	old.transport.CloseIdleConnections()
	r.log.Info("the admission certificate changed: serving the new one", "server_name", st.serverName, "not_after", st.cert.Leaf.NotAfter)
}

// getCertificate serves the certificate of the moment.
func (r *Relay) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	st := r.tls.Load()
	if st == nil {
		return nil, errors.New("no admission certificate")
	}
	return st.cert, nil
}
