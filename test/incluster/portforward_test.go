package incluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

// TestHandlerOnTheHostThroughPortForward is the laptop's way in: `kubectl
// port-forward` to the broker's Service, the CA from the ConfigMap the
// broker publishes, and a token from `kubectl create token` for the
// handler's ServiceAccount. The handler on the host connects as a second
// instance of the example handler, bound to the namespace that opted in:
// the broker checks its bindings against that ServiceAccount's rights, and
// instances of one handler bind the same namespaces (the in-cluster one
// finds it within its --grant-interval).
func TestHandlerOnTheHostThroughPortForward(t *testing.T) {
	c := node.Get(t)
	install(t, c)
	dir := t.TempDir()
	ns := namespace(t, c, "laptop")
	optIn(t, c, ns)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pf := exec.CommandContext(ctx, c.Binaries().Kubectl, "--kubeconfig", c.KubeconfigPath(), "-n", tetherNS,
		"port-forward", "--address", "127.0.0.1", "svc/tether-broker", ":7443")
	out, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pf.Stderr = pf.Stdout
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = pf.Wait() }()
	port := forwardedPort(t, out)

	cm, err := c.Client().CoreV1().ConfigMaps(exampleNS).Get(ctx, "tether-broker-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(ca, []byte(cm.Data["ca.crt"]), 0o600); err != nil {
		t.Fatal(err)
	}
	// A token for the broker's audience (--token-audience in deploy/): the
	// default one, for the API server, is refused at sign-in.
	tok := kubectl(t, c, "-n", exampleNS, "create", "token", "example-handler", "--audience", "tether.dev/broker")
	if err := os.WriteFile(token, []byte(strings.TrimSpace(tok)), 0o600); err != nil {
		t.Fatal(err)
	}

	bin := gobin.Build(t, "github.com/tether-dev/tether/cmd/example-handler")
	var logs testenv.Lines
	h := exec.CommandContext(ctx, bin, "--broker", fmt.Sprintf("127.0.0.1:%s", port), "--tls-ca-file", ca,
		"--token-file", token, "--kubeconfig", c.KubeconfigPath(), "--namespaces", ns)
	h.Stdout, h.Stderr = &logs, &logs
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = h.Wait() }()
	testenv.WaitFor(t, optInBound, "the handler on the host to connect", func(context.Context) error {
		if logs.Any(func(l string) bool { return strings.Contains(l, "connected to broker") }) {
			return nil
		}
		return fmt.Errorf("not connected yet:\n%s", logs.Text())
	})
}

// forwardedPort reads the local port from port-forward's first line,
// "Forwarding from 127.0.0.1:PORT -> 7443", and drains the rest.
func forwardedPort(t *testing.T, out io.Reader) string {
	t.Helper()
	lines := bufio.NewScanner(out)
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`)
	var seen []string
	for lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return m[1]
		}
		seen = append(seen, lines.Text())
	}
	t.Fatalf("kubectl port-forward ended before it forwarded:\n%s", strings.Join(seen, "\n"))
	return ""
}
