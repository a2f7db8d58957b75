package sdk

import "context"

// WithLookup makes a handler find a DNS name's replicas with f instead of
// the resolver, so that a test can name replicas on loopback (which lookup
// leaves out).
func WithLookup(f func(ctx context.Context, host, port string) ([]string, error)) Option {
	return func(c *config) { c.lookup = f }
}
