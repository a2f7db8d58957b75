package relay

import (
	"context"
	"slices"
	"testing"
)

type fakeResolver map[string][]string

func (f fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	return f[host], nil
}

func TestDNSPeersLeaveOutTheOwnAddress(t *testing.T) {
	r := fakeResolver{"tether-broker-replicas": {"10.0.0.1", "10.0.0.2", "fd00::0:3", "fd00::4"}}
	for _, tc := range []struct {
		own  string
		want []string
	}{
		{"10.0.0.1", []string{"10.0.0.2:8444", "[fd00::0:3]:8444", "[fd00::4]:8444"}},
		{"fd00::3", []string{"10.0.0.1:8444", "10.0.0.2:8444", "[fd00::4]:8444"}}, // another spelling
		{"", []string{"10.0.0.1:8444", "10.0.0.2:8444", "[fd00::0:3]:8444", "[fd00::4]:8444"}},
	} {
		got, err := DNSPeers{Name: "tether-broker-replicas", Port: 8444, Own: tc.own, Resolver: r}.Peers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("own %q: peers %q, want %q", tc.own, got, tc.want)
		}
	}
}
