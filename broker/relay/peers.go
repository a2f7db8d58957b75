package relay

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// Peers lists the admission addresses (HOST:PORT) of the other replicas,
// which the relay tries in turn when the local broker refuses a connection.
type Peers interface {
	Peers(ctx context.Context) ([]string, error)
}

// Resolver looks a name up as net.Resolver.LookupHost does.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// DNSPeers are the addresses a DNS name resolves to (the A and AAAA
// records of a headless Service: every replica, ready or not), without Own, each
// on Port.
type DNSPeers struct {
	Name string
	Port int
	// Own is this replica's address, left out: the local broker was just
	// tried and refused.
	Own string
	// Resolver is net.DefaultResolver when nil.
	Resolver Resolver
}

// Peers looks Name up now: replicas come and go, and a relay needs peers
// only while its local broker is down, which is rare.
func (d DNSPeers) Peers(ctx context.Context) ([]string, error) {
	var r Resolver = net.DefaultResolver
	if d.Resolver != nil {
		r = d.Resolver
	}
	hosts, err := r.LookupHost(ctx, d.Name)
	if err != nil {
		return nil, fmt.Errorf("looking up the replicas %s: %w", d.Name, err)
	}
	own := net.ParseIP(d.Own)
	var out []string
	for _, h := range hosts {
		// Compared as addresses: an IPv6 address has several spellings.
		if ip := net.ParseIP(h); ip != nil && own != nil && ip.Equal(own) {
			continue
		}
		out = append(out, net.JoinHostPort(h, strconv.Itoa(d.Port)))
	}
	return out, nil
}
