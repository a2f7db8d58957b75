package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/sdk"
)

func TestCheckTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl  string
		want string // a part of the message; empty: accepted
	}{
		{"1h", ""},
		{"30m", ""},
		{"1h30m", ""},
		{"90s", ""},
		{"1ns", ""},
		{"banana", `ttl.tether.dev/ttl: "banana" is not a duration such as 1h or 30m`},
		{"", `ttl.tether.dev/ttl: "" is not a duration`},
		{"3", `"3" is not a duration`},
		{"1d", `"1d" is not a duration`},
		{" 1h", `" 1h" is not a duration`},
		{"0s", `ttl.tether.dev/ttl: "0s" is not positive`},
		{"0", `"0" is not positive`},
		{"-5m", `"-5m" is not positive`},
	} {
		got := checkTTL(tc.ttl)
		switch {
		case tc.want == "" && got != "":
			t.Errorf("checkTTL(%q) refuses: %s", tc.ttl, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("checkTTL(%q) = %q, want it to say %q", tc.ttl, got, tc.want)
		}
	}
}

func TestReviewDeniesABadTTLWithItsMessage(t *testing.T) {
	for _, tc := range []struct {
		ttl    string
		denied bool
	}{{"banana", true}, {"-1h", true}, {"10m", false}} {
		err := reviewTTL(context.Background(), &sdk.Review{Operation: sdk.OpCreate, Object: ttlSecret(tc.ttl, time.Now())})
		var denied *sdk.DeniedError
		switch {
		case !tc.denied && err != nil:
			t.Errorf("ttl %q: %v, want admitted", tc.ttl, err)
		case tc.denied && !errors.As(err, &denied):
			t.Errorf("ttl %q: %v, want a denial (any other error is a failure, and the failure policy would admit it)", tc.ttl, err)
		case tc.denied && denied.Message != checkTTL(tc.ttl):
			t.Errorf("ttl %q: denied with %q, want %q", tc.ttl, denied.Message, checkTTL(tc.ttl))
		}
	}
}

// The webhook's options are checked by the SDK before it connects: Run with
// a context already done returns their errors, or nil.
func TestTTLWebhookBindingIsValid(t *testing.T) {
	for _, scope := range [][]sdk.BindingOption{nil, {sdk.Namespaces("team-a", "team-b")}} {
		h := sdk.New("example")
		registerTTLWebhook(h, scope, false)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.Run(ctx, "127.0.0.1:1"); err != nil {
			t.Errorf("scope %d options: %v", len(scope), err)
		}
	}
}
