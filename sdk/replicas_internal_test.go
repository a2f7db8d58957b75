package sdk

import "testing"

// TestOnlyADNSNameIsLookedUpForEveryReplica: a name is looked up for its
// replicas; an IP address, localhost and targets of other schemes keep
// one session, as always.
func TestOnlyADNSNameIsLookedUpForEveryReplica(t *testing.T) {
	for target, want := range map[string]bool{
		"tether-broker-replicas.tether-system.svc:7443":        true,
		"dns:///tether-broker-replicas.tether-system.svc:7443": true,
		"10.0.0.7:7443":           false,
		"[fd00::7]:7443":          false,
		"localhost:7443":          false,
		"passthrough:///bufnet":   false,
		"unix:///run/tether.sock": false,
		"tether-broker":           false, // no port
	} {
		if _, _, got := dnsTarget(target); got != want {
			t.Errorf("dnsTarget(%q) = %v, want %v", target, got, want)
		}
	}
}
