package sdk

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Defaults of the handler options.
const (
	DefaultWindow       = 16
	DefaultReconnectMin = 500 * time.Millisecond
	// DefaultReconnectMax brings a handler back within about 2 s of the
	// broker being ready again, so that a failover costs the lease and not
	// the backoff (a 10 s cap made a handler come back up to 13 s after the
	// broker was ready, in the failover benchmark);
	// a broker that stays away costs one connection attempt every 2 s. It
	// is well inside the broker's default grace of 30 s, counted from when
	// the broker is ready, in which a handler must be back before the
	// objects being deleted that it holds are released.
	DefaultReconnectMax     = 2 * time.Second
	DefaultDrainTimeout     = 10 * time.Second
	DefaultServiceTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	// DefaultBrokerTokenPath is where a handler's manifests mount a
	// projected ServiceAccount token meant for the broker alone (audience
	// tether.dev/broker, the broker's --token-audience in deploy/): a token
	// the broker may not replay against the API server, and that no other
	// Pod's token can stand in for.
	DefaultBrokerTokenPath   = "/var/run/secrets/tether.dev/token"
	maxWindow                = 1 << 16
	defaultLoggerName        = "tether-sdk"
	defaultInstanceRandBytes = 3
)

// Option configures a Handler. Options are applied by New; an invalid one
// makes Run return an error before it connects.
type Option func(*config)

// Dialer opens the network connection to the broker address. The default
// dials TCP (or what the gRPC target scheme names, e.g. unix://).
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// RoundRobin dials the broker replicas at addrs (HOST:PORT) in turn, one per
// connection, in place of the address Run is given (which must still be a
// gRPC target: the first replica's address will do; TLS verifies its name).
// It is for handlers that reach the replicas without a Service in front (a
// laptop, a test): a follower refuses the session with Unavailable, the
// handler reconnects, and the next connection tries the next replica. A
// handler with validate or mutate bindings keeps instead one session to
// each of addrs (Run), so that every replica can answer its reviews.
func RoundRobin(addrs ...string) Dialer {
	addrs = slices.Clone(addrs)
	var n atomic.Uint64
	return func(ctx context.Context, _ string) (net.Conn, error) {
		if q, ok := ctx.Value(replicasQueryKey{}).(*replicasQuery); ok {
			q.addrs = addrs
			return nil, errors.New("tether: RoundRobin answered with its addresses")
		}
		if len(addrs) == 0 {
			return nil, errors.New("tether: RoundRobin has no broker addresses")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addrs[(n.Add(1)-1)%uint64(len(addrs))])
	}
}

type config struct {
	logger       hclog.Logger
	window       int
	instanceID   string
	token        string
	tokenFiles   []string
	tlsConfig    *tls.Config
	tlsCAFile    string
	insecure     bool
	backoffMin   time.Duration
	backoffMax   time.Duration
	drainTimeout time.Duration
	dialer       Dialer
	// tracerProvider makes the functions' spans; nil: the global one.
	tracerProvider trace.TracerProvider
	errs           []error
	// grace and absentAfter are asked of the broker when set.
	grace, absentAfter *time.Duration
	priority           int32
	// lookup finds a DNS name's replicas (HOST:PORT); nil: lookup. Tests
	// set it (export_test.go) to name replicas on loopback.
	lookup func(ctx context.Context, host, port string) ([]string, error)
}

func defaultConfig() config {
	return config{
		window:       DefaultWindow,
		backoffMin:   DefaultReconnectMin,
		backoffMax:   DefaultReconnectMax,
		drainTimeout: DefaultDrainTimeout,
	}
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// WithLogger sets the logger. The default writes to stderr at Info level
// under the name "tether-sdk".
func WithLogger(l hclog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("WithLogger: nil logger")
			return
		}
		c.logger = l
	}
}

// WithWindow sets how many deliveries the handler runs at once (default 16).
// The broker may cap it; it never sends more.
func WithWindow(n int) Option {
	return func(c *config) {
		if n < 1 || n > maxWindow {
			c.fail("WithWindow: window %d out of range 1..%d", n, maxWindow)
			return
		}
		c.window = n
	}
}

// WithInstanceID sets the id of this process among the handler's instances.
// The default is "<hostname>-<pid>-<random>".
func WithInstanceID(id string) Option {
	return func(c *config) {
		if id == "" {
			c.fail("WithInstanceID: empty id")
			return
		}
		c.instanceID = id
	}
}

// WithToken sets the bearer token sent with every connection attempt.
func WithToken(token string) Option {
	return func(c *config) {
		if token == "" {
			c.fail("WithToken: empty token")
			return
		}
		c.token, c.tokenFiles = token, nil
	}
}

// DefaultTokenPaths are the token files a handler reads when neither
// WithToken nor WithTokenFile nor WithInsecure is given: the first that
// exists at each connection attempt, the broker's own audience first.
var DefaultTokenPaths = []string{DefaultBrokerTokenPath, DefaultServiceTokenPath}

// WithTokenFile reads the bearer token from path on every connection
// attempt, so a rotated ServiceAccount token is picked up on reconnect. When
// neither WithToken nor WithTokenFile nor WithInsecure is given, the first
// of DefaultTokenPaths that exists is read.
func WithTokenFile(path string) Option {
	return func(c *config) {
		if path == "" {
			c.fail("WithTokenFile: empty path")
			return
		}
		c.tokenFiles, c.token = []string{path}, ""
	}
}

// WithTLS sets the TLS configuration used to reach the broker. The default
// verifies the broker against the system roots.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) {
		if cfg == nil {
			c.fail("WithTLS: nil config")
			return
		}
		c.tlsConfig = cfg
	}
}

// WithTLSCAFile verifies the broker against the PEM CA bundle in path, read
// anew at every connection attempt, so that a rotated CA (the broker's
// ConfigMap tether-broker-ca, mounted) is trusted at the next reconnect. It
// replaces the RootCAs of WithTLS's configuration, whose other settings
// (ServerName) still apply.
func WithTLSCAFile(path string) Option {
	return func(c *config) {
		if path == "" {
			c.fail("WithTLSCAFile: empty path")
			return
		}
		c.tlsCAFile = path
	}
}

// WithInsecure connects in plain text and sends no token. Only for a broker
// started in development mode on loopback.
func WithInsecure() Option {
	return func(c *config) { c.insecure = true }
}

// WithReconnectBackoff sets the bounds of the exponential, jittered delay
// between connection attempts (default 500ms to 30s).
func WithReconnectBackoff(minDelay, maxDelay time.Duration) Option {
	return func(c *config) {
		if minDelay <= 0 || maxDelay < minDelay {
			c.fail("WithReconnectBackoff: need 0 < min <= max, got %s, %s", minDelay, maxDelay)
			return
		}
		c.backoffMin, c.backoffMax = minDelay, maxDelay
	}
}

// WithDrainTimeout sets how long a stopping handler waits for deliveries in
// flight before it cancels them (default 10s).
func WithDrainTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithDrainTimeout: negative timeout %s", d)
			return
		}
		c.drainTimeout = d
	}
}

// WithGrace asks the broker for another grace than its default: how long
// the handler may have no instance connected before the objects being
// deleted that it holds are released. The broker clamps it to its limits.
func WithGrace(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithGrace: negative grace %s", d)
			return
		}
		c.grace = &d
	}
}

// WithAbsentReleaseAfter asks the broker to strip the handler's holds from
// every object after it has been absent this long (0: never, within the
// broker's limits); they are added again when it returns.
func WithAbsentReleaseAfter(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithAbsentReleaseAfter: negative duration %s", d)
			return
		}
		c.absentAfter = &d
	}
}

// WithPriority sets this instance's priority among the handler's instances
// (default 0). While it is connected, the instances of the highest priority
// take every object and review of the handler, and the others none: run a
// handler on a laptop with WithPriority(1) and it takes over from the
// in-cluster instances, daemons included, until it stops, when they get it
// all back. Like kopf run --dev. Above 0 the handler's identity needs the
// verb "takeover" on handlers.tether.dev/<name> (docs/security.md); the
// broker takes 0 to tetherv1.MaxPriority.
func WithPriority(n int) Option {
	return func(c *config) {
		if n < 0 || n > tetherv1.MaxPriority {
			c.fail("WithPriority: priority %d out of range 0..%d", n, tetherv1.MaxPriority)
			return
		}
		c.priority = int32(n)
	}
}

// WithDialer replaces how the network connection to the broker is opened,
// e.g. to go through a proxy or, in tests, an in-memory listener.
func WithDialer(d Dialer) Option {
	return func(c *config) {
		if d == nil {
			c.fail("WithDialer: nil dialer")
			return
		}
		c.dialer = d
	}
}

// finish fills in the defaults that depend on other options and checks the
// combinations.
func (c *config) finish() error {
	if c.logger == nil {
		c.logger = hclog.New(&hclog.LoggerOptions{
			Name:   defaultLoggerName,
			Level:  hclog.Info,
			Output: os.Stderr,
		})
	}
	if c.instanceID == "" {
		c.instanceID = defaultInstanceID()
	}
	if c.insecure && c.tlsConfig != nil {
		c.fail("WithInsecure and WithTLS both given")
	}
	if c.insecure && c.tlsCAFile != "" {
		c.fail("WithInsecure and WithTLSCAFile both given")
	}
	if !c.insecure && c.token == "" && len(c.tokenFiles) == 0 {
		c.tokenFiles = DefaultTokenPaths
	}
	return errors.Join(c.errs...)
}

func defaultInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, defaultInstanceRandBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}
