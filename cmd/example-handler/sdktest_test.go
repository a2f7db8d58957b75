package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/sdk/sdktest"
)

// TestTTLBindingsThroughTheSDK registers the TTL reaper and its webhook as
// main does and plays the broker (sdktest): a bad ttl is refused at
// admission with its message, a good one admitted, and a tick of a Secret
// whose ttl cannot be read fails for good rather than retrying forever.
func TestTTLBindingsThroughTheSDK(t *testing.T) {
	b := sdktest.New(t)
	h := sdk.New("example", b.Options()...)
	(&reaper{now: time.Now}).register(h, time.Minute, nil)
	registerTTLWebhook(h, nil, false)
	b.Run(h)

	v := b.Validate(sdk.OpCreate, ttlSecret("banana", time.Now()), nil)
	if v.Allowed || !strings.Contains(v.Message, `"banana" is not a duration`) {
		t.Errorf("a bad ttl: %+v, want it refused with its message", v)
	}
	if v := b.Validate(sdk.OpCreate, ttlSecret("10m", time.Now()), nil); !v.Allowed {
		t.Errorf("a good ttl: %+v, want it admitted", v)
	}
	if got := b.Tick(ttlSecret("banana", time.Now())); got.Outcome != sdktest.Fail || got.Binding != "ttl-secrets" {
		t.Errorf("a tick with a bad ttl: %v, want a permanent failure of ttl-secrets", got)
	}
}

// TestTTLWebhookFailsClosedWhenAsked: --ttl-webhook-fail-closed gives the
// webhook failurePolicy Fail, so that no Secret with a ttl is admitted
// unchecked while no instance answers; without it the webhook fails open.
func TestTTLWebhookFailsClosedWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		closed bool
	}{
		{nil, false},
		{[]string{"--ttl-webhook-fail-closed"}, true},
	} {
		c, err := parseFlags(tc.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("flags %q: %v", tc.args, err)
		}
		b := sdktest.New(t)
		h := sdk.New("example", b.Options()...)
		registerTTLWebhook(h, nil, c.ttlWebhookFailClosed)
		b.Run(h)
		i := slices.IndexFunc(b.Bindings(), func(bd *tetherv1.Binding) bool { return bd.GetId() == "validate-ttl" })
		if i < 0 {
			t.Fatalf("flags %q: no binding validate-ttl among %v", tc.args, b.Bindings())
		}
		p := b.Bindings()[i].GetAdmission().GetFailurePolicy()
		if closed := p == tetherv1.FailurePolicy_FAILURE_POLICY_FAIL; closed != tc.closed {
			t.Errorf("flags %q: the webhook's failure policy is %v, want fail-closed %v", tc.args, p, tc.closed)
		}
	}
}
