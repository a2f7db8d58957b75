package broker

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// A part that cannot be built is an error from Start, not a panic: what
// assemble built before it is stopped, and nothing it did not build.
func TestStartReturnsThePartItCouldNotBuild(t *testing.T) {
	b, err := New(Options{Config: &rest.Config{Host: "http://[::1"}, Listen: "127.0.0.1:0", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "client") {
		t.Fatalf("Start = %v, want the error of creating a client", err)
	}
}
