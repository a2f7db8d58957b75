package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestManifestFlagsExist builds the broker and the example handler and checks
// that every flag the Deployments pass them is one they define, so that a
// renamed or not yet added flag cannot crash-loop the Pods.
func TestManifestFlagsExist(t *testing.T) {
	root := repoRoot(t)
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(os.PathSeparator), "./cmd/broker", "./cmd/example-handler")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	flagLine := regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`)
	for _, tc := range []struct {
		binary string
		sub    []string // the subcommand
		args   []string
	}{
		{"broker", nil, brokerArgs},
		{"broker", []string{"relay"}, relayArgs[1:]},
		{"example-handler", nil, handlerArgs},
	} {
		help, _ := exec.CommandContext(ctx, filepath.Join(bin, tc.binary), append(slices.Clone(tc.sub), "-help")...).CombinedOutput()
		defined := map[string]bool{}
		for _, m := range flagLine.FindAllStringSubmatch(string(help), -1) {
			defined[m[1]] = true
		}
		if len(defined) == 0 {
			t.Fatalf("%s -help lists no flags:\n%s", tc.binary, help)
		}
		for _, a := range tc.args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !defined[name] {
				t.Errorf("the manifests pass %s to %s, which has no flag -%s", a, strings.Join(append([]string{tc.binary}, tc.sub...), " "), name)
			}
		}
	}
	// The arguments above are the ones in the files, by container.
	for file, want := range map[string]map[string][]string{
		"deploy/broker/deployment.yaml":          {"broker": brokerArgs, "relay": relayArgs},
		"deploy/example-handler/deployment.yaml": {"handler": handlerArgs},
	} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeAll(t, data) {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				var got []string
				for _, a := range c.(map[string]any)["args"].([]any) {
					got = append(got, a.(string))
				}
				name, _ := c.(map[string]any)["name"].(string)
				if !slices.Equal(got, want[name]) {
					t.Errorf("%s passes %q to container %s, this test checks %q", file, got, name, want[name])
				}
			}
		}
	}
}
