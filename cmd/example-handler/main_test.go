package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-help"}, &out); code != 0 {
		t.Fatalf("-help exited %d", code)
	}
	for _, f := range []string{"-broker", "-insecure", "-tls-ca-file", "-tls-server-name", "-token", "-token-file",
		"-kubeconfig", "-name", "-namespaces", "-log-level", "-log-format", "-reconcile-interval", "-ttl-interval",
		"-ttl-webhook", "-ttl-webhook-fail-closed", "--admission-listen", "replicator.tether.dev/enabled", "ttl.tether.dev/ttl", "SIGTERM"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("help lacks %s", f)
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.broker != "127.0.0.1:7443" || c.name != "example" || c.reconcileInterval != 30*time.Second ||
		c.ttlInterval != 5*time.Second || !c.ttlWebhook || c.logFormat != "text" || c.insecure {
		t.Errorf("defaults: %+v", c)
	}
}

func TestFlagsRejectBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--log-level", "loud"},
		{"--log-format", "yaml"},
		{"--token", "a", "--token-file", "b"},
		{"--insecure", "--tls-ca-file", "ca.pem"},
		{"--reconcile-interval", "1ms"},
		{"--ttl-interval", "0s"},
		{"--priority", "-1"},
		{"--priority", "1001"},
		{"--broker", ""},
		{"extra"},
		{"--no-such-flag"},
	} {
		var out bytes.Buffer
		if code := run(args, &out); code != 2 {
			t.Errorf("run(%q) exited %d, want 2 (output %q)", args, code, out.String())
		}
	}
}

func TestTLSOptions(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &config{caFile: bad}
	if _, err := c.sdkOptions(hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without certificates: %v", err)
	}
	c = &config{caFile: filepath.Join(dir, "missing.pem")}
	if _, err := c.sdkOptions(hclog.NewNullLogger()); err == nil {
		t.Error("a missing CA file is accepted")
	}
}
