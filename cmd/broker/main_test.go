package main

import (
	"io"
	"slices"
	"testing"
)

// TestLeaseDurationAloneIsEnough: the renew deadline and retry period are
// left to derive from --leader-elect-lease-duration, so that a short lease
// alone is a valid configuration (they defaulted to 10s and 2s, which
// client-go refuses beside a 5s lease).
func TestLeaseDurationAloneIsEnough(t *testing.T) {
	c, err := parseFlags([]string{"--insecure", "--leader-elect", "--leader-elect-lease-duration", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.leader.RenewDeadline != 0 || c.leader.RetryPeriod != 0 {
		t.Errorf("renew deadline %v, retry period %v: set by the flags' defaults, not derived from the 5s lease",
			c.leader.RenewDeadline, c.leader.RetryPeriod)
	}
}

func TestAdmissionExcludedNamespacesFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // nil: refused
	}{
		{"the default", nil, []string{"kube-system", "kube-node-lease"}},
		{"kube-system opted in", []string{"--admission-exclude-namespaces", "kube-node-lease"}, []string{"kube-node-lease"}},
		{"one more excluded", []string{"--admission-exclude-namespaces", "kube-system, kube-node-lease,calico-system"}, []string{"kube-system", "kube-node-lease", "calico-system"}},
		{"empty: none but the broker's own", []string{"--admission-exclude-namespaces="}, []string{}},
		{"not a namespace name", []string{"--admission-exclude-namespaces", "Kube_System"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(append([]string{"--insecure", "--admission-listen", "127.0.0.1:0"}, tc.args...), io.Discard)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("accepted, excluding %q", c.admission.ExcludeNamespaces)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Not nil, even when empty: nil would mean the default.
			if got := c.admission.ExcludeNamespaces; got == nil || !slices.Equal(got, tc.want) {
				t.Errorf("excluded %#v, want %#v", got, tc.want)
			}
		})
	}
}
