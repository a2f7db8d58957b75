package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/kube"
)

// Defaults of Options.
const (
	DefaultValidity   = 365 * 24 * time.Hour
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	DefaultInterval   = 30 * time.Second
	DefaultCAOverlap  = 7 * 24 * time.Hour
)

// Options configure Serving. Either CertFile and KeyFile are set (a given
// certificate, cert-manager style) or Client, Namespace and SecretName are
// (a generated CA and certificate kept in a Secret).
type Options struct {
	// Name says what the certificate serves ("admission", "grpc") in
	// messages, in the generated certificates' common names and in the
	// Secret's component label; default "serving".
	Name string
	// Client reads and writes the Secret in generated mode.
	Client kube.Interface
	// Namespace of the Secret: the broker's own.
	Namespace string
	// SecretName of the Secret.
	SecretName string
	// DNSNames and IPAddresses the generated serving certificate is valid
	// for: the Service's names inside a cluster, the address the API server
	// dials outside one. At least one is required in generated mode.
	DNSNames    []string
	IPAddresses []net.IP

	// CertFile and KeyFile are a given serving certificate and key (PEM);
	// CAFile, optional, is the CA bundle that verifies it (without it,
	// CABundle is nil: clients use their system roots). When set, nothing is
	// generated, and the files are read again when they change.
	CertFile, KeyFile, CAFile string

	Log hclog.Logger
	// Validity of a generated serving certificate; default DefaultValidity.
	// It is renewed, on the same CA, when less than a third is left.
	Validity time.Duration
	// CAValidity of a generated CA; default DefaultCAValidity.
	CAValidity time.Duration
	// Interval between checks of the Secret or the files; default
	// DefaultInterval.
	Interval time.Duration
	// CAOverlap is how long a new CA is published beside the old one before
	// it signs what is served, and how long the old one stays published
	// after; default DefaultCAOverlap.
	CAOverlap time.Duration
	// Clock tells the time certificates are judged and made at; default the
	// real one.
	Clock clock.PassiveClock
}

// Serving is a serving certificate and the CA bundle that verifies it.
type Serving struct {
	opts Options
	log  hclog.Logger

	// loadMu serializes loads: Load and the loop of Start.
	loadMu sync.Mutex
	// stamps are the files' states at the last load, in file mode.
	stamps []fileStamp

	cert    atomic.Pointer[tls.Certificate]
	bundle  atomic.Pointer[[]byte]
	changed chan struct{}
}

// New checks opts and returns a Serving holding nothing yet: call Load.
func New(opts Options) (*Serving, error) {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Name == "" {
		opts.Name = "serving"
	}
	if opts.Validity <= 0 {
		opts.Validity = DefaultValidity
	}
	if opts.CAValidity <= 0 {
		opts.CAValidity = DefaultCAValidity
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.CAOverlap <= 0 {
		opts.CAOverlap = DefaultCAOverlap
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.DNSNames = slices.Clone(opts.DNSNames)
	opts.IPAddresses = slices.Clone(opts.IPAddresses)
	switch {
	case opts.CertFile != "" || opts.KeyFile != "":
		if opts.CertFile == "" || opts.KeyFile == "" {
			return nil, fmt.Errorf("%s certificates: a given certificate needs both a certificate file and a key file", opts.Name)
		}
	case opts.CAFile != "":
		return nil, fmt.Errorf("%s certificates: a CA file is only for a given certificate; set the certificate and key files too", opts.Name)
	case opts.Client == nil || opts.Namespace == "" || opts.SecretName == "":
		return nil, fmt.Errorf("%s certificates: generating them needs a Kubernetes client, and a namespace and a name for their Secret", opts.Name)
	case len(opts.DNSNames) == 0 && len(opts.IPAddresses) == 0:
		return nil, fmt.Errorf("%s certificates: generating them needs at least one DNS name or IP address to serve", opts.Name)
	}
	if opts.CAValidity < opts.Validity {
		return nil, fmt.Errorf("%s certificates: the CA validity %v is shorter than the serving certificate's %v", opts.Name, opts.CAValidity, opts.Validity)
	}
	return &Serving{opts: opts, log: opts.Log, changed: make(chan struct{}, 1)}, nil
}

// generated reports whether the certificates are generated, not given.
func (c *Serving) generated() bool { return c.opts.CertFile == "" }

// Load reads or creates the certificates: the Secret in generated mode,
// the files otherwise. Call it before serving; GetCertificate fails until
// it succeeds.
func (c *Serving) Load(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if c.generated() {
		return c.syncSecret(ctx)
	}
	return c.loadFiles(true)
}

// Start keeps the certificates fresh until ctx ends: every Interval it
// re-reads the Secret (renewing what is due, taking what another replica
// renewed) or the files that changed. Errors are logged and the current
// certificate kept. It calls Load first when Load has not succeeded.
func (c *Serving) Start(ctx context.Context) error {
	if c.cert.Load() == nil {
		if err := c.Load(ctx); err != nil {
			return err
		}
	}
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.refresh(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("cannot refresh the certificates; keeping the current ones", "error", err)
		}
	}
}

func (c *Serving) refresh(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if c.generated() {
		return c.syncSecret(ctx)
	}
	return c.loadFiles(false)
}

// GetCertificate returns the serving certificate, for tls.Config.
func (c *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.cert.Load(); cert != nil {
		return cert, nil
	}
	return nil, fmt.Errorf("the %s certificates are not loaded yet", c.opts.Name)
}

// CABundle returns the PEM CA certificates that verify the serving
// certificate, for the webhook configurations' caBundle; nil before Load,
// or for a given certificate without a CA file.
func (c *Serving) CABundle() []byte {
	if b := c.bundle.Load(); b != nil {
		return bytes.Clone(*b)
	}
	return nil
}

// Changed receives a value after CABundle changed (a new CA, or a new CA
// file), so the webhook configurations can be written again. Changes that
// come before the value is received make one value; the first Load sends
// none. It is meant for one receiver.
func (c *Serving) Changed() <-chan struct{} { return c.changed }

// use serves cert and bundle from now on.
func (c *Serving) use(cert tls.Certificate, bundle []byte) {
	c.cert.Store(&cert)
	old := c.bundle.Swap(&bundle)
	if old != nil && !bytes.Equal(*old, bundle) {
		c.log.Info("the CA bundle changed")
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}
