package tetherv1

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestThePythonSDKsLimitsAreTheProtocols: the Python SDK cannot import this
// package, so sdk/python/tether/limits.py repeats the limits it needs; each
// must say what this file says.
func TestThePythonSDKsLimitsAreTheProtocols(t *testing.T) {
	src, err := os.ReadFile("../../../sdk/python/tether/limits.py")
	if err != nil {
		t.Fatal(err)
	}
	py := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+) = (\d+)(?: << (\d+))?$`).FindAllStringSubmatch(string(src), -1) {
		v, _ := strconv.Atoi(m[2])
		if m[3] != "" {
			shift, _ := strconv.Atoi(m[3])
			v <<= shift
		}
		py[m[1]] = v
	}
	for name, want := range map[string]int{
		"MAX_RESULT_BYTES": MaxResultBytes, "MAX_NAMESPACES": MaxNamespaces, "MAX_HELLO_NAMESPACES": MaxHelloNamespaces,
		"DEFAULT_MAX_MESSAGE_BYTES": DefaultMaxMessageBytes, "MAX_PRIORITY": MaxPriority, "MAX_ACK_EVENTS": MaxAckEvents,
		"MAX_EVENT_REASON_BYTES": MaxEventReasonBytes, "MAX_EVENT_MESSAGE_BYTES": MaxEventMessageBytes,
		"MAX_RESULT_KEY_BYTES": MaxResultKeyBytes, "MAX_PROGRESS_BYTES": MaxProgressBytes, "MAX_ACK_BATCH": MaxAckBatch,
	} {
		got, ok := py[name]
		if !ok {
			t.Errorf("limits.py has no %s", name)
			continue
		}
		if got != want {
			t.Errorf("limits.py: %s = %d, the protocol says %d", name, got, want)
		}
	}
}
