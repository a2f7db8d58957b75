package main

import (
	"io"
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
