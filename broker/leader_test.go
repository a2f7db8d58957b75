package broker

import (
	"testing"
	"time"
)

// TestLeaderElectionTimingsDeriveFromTheLease: only the lease duration
// given, the renew deadline and retry period follow from it, so that
// client-go accepts them (lease > renew deadline > retry period).
func TestLeaderElectionTimingsDeriveFromTheLease(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		in                    LeaderElection
		lease, renew, retries time.Duration
	}{
		{"none given: client-go's", LeaderElection{}, 15 * time.Second, 10 * time.Second, 2 * time.Second},
		{"a short lease", LeaderElection{LeaseDuration: 3 * time.Second}, 3 * time.Second, 2 * time.Second, time.Second},
		{"a long lease", LeaderElection{LeaseDuration: time.Minute}, time.Minute, 10 * time.Second, 2 * time.Second},
		{"all given", LeaderElection{LeaseDuration: 9 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 500 * time.Millisecond},
			9 * time.Second, 4 * time.Second, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.withDefaults()
			if got.LeaseDuration != tc.lease || got.RenewDeadline != tc.renew || got.RetryPeriod != tc.retries {
				t.Errorf("lease %v renew %v retry %v, want %v %v %v", got.LeaseDuration, got.RenewDeadline, got.RetryPeriod, tc.lease, tc.renew, tc.retries)
			}
			if got.LeaseName != "tether-broker-leader" {
				t.Errorf("lease name %q", got.LeaseName)
			}
		})
	}
}
