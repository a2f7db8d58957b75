package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc/credentials"
)

// caFileCredentials is TLS that trusts the CA bundle in a file, read anew
// at every connection attempt: the broker publishes a new CA beside the
// old one before it switches to it, and a handler that mounts the bundle
// (a ConfigMap the kubelet updates) trusts the new one at its next
// connection without a restart.
type caFileCredentials struct {
	credentials.TransportCredentials // the base config's, for Info and the server side
	base                             *tls.Config
	file                             string
}

func newCAFileCredentials(base *tls.Config, file string) *caFileCredentials {
	return &caFileCredentials{TransportCredentials: credentials.NewTLS(base), base: base, file: file}
}

// ClientHandshake reads the CA file and verifies the broker against it.
func (c *caFileCredentials) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pemData, err := os.ReadFile(c.file)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the broker's CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, nil, fmt.Errorf("the broker's CA bundle %s holds no PEM certificate", c.file)
	}
	cfg := c.base.Clone()
	cfg.RootCAs = pool
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
}

func (c *caFileCredentials) Clone() credentials.TransportCredentials {
	return newCAFileCredentials(c.base.Clone(), c.file)
}
