package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func TestLoadOrder(t *testing.T) {
	dir := t.TempDir()
	explicit := filepath.Join(dir, "explicit")
	env := filepath.Join(dir, "env")
	for _, p := range []string{explicit, env} {
		if err := os.WriteFile(p, []byte(sample), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("HOME", dir) // no ~/.kube/config there
	t.Setenv("KUBECONFIG", env)
	if _, from, err := Load(explicit); err != nil || from != "kubeconfig "+explicit {
		t.Errorf("explicit path: %q, %v", from, err)
	}
	if cfg, from, err := Load(""); err != nil || from != "$KUBECONFIG" || cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("$KUBECONFIG: %q, %v", from, err)
	}
	t.Setenv("KUBECONFIG", "")
	if _, _, err := Load(""); err == nil || !strings.Contains(err.Error(), "no cluster found") {
		t.Errorf("nothing to find: %v", err)
	}
	if _, _, err := Load(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing explicit file is an error")
	}
}
