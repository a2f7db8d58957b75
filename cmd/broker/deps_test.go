package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheBrokerDoesNotLinkClientGosScheme: the broker's binary links
// neither client-go's clientset nor its scheme, whose initializer alone
// costs about 10 MiB of resident memory (package broker/kube). A package
// that imports client-go's typed clients, discovery, leaderelection or
// informers brings them back.
func TestTheBrokerDoesNotLinkClientGosScheme(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for dep := range strings.SplitSeq(string(out), "\n") {
		if dep == "k8s.io/client-go/kubernetes" || strings.HasPrefix(dep, "k8s.io/client-go/kubernetes/") {
			t.Errorf("cmd/broker links %s; use package broker/kube", dep)
		}
	}
}
