package sdk

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestDeliveryLoggerNamesTheDeliveryOnlyWhenItLogs(t *testing.T) {
	var out bytes.Buffer
	base := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &out})
	d := &tetherv1.Delivery{Id: "d-1", BindingId: "tick", Attempt: 2, Ref: &tetherv1.ObjectRef{Namespace: "ns", Name: "w-1"}}
	l := newDeliveryLogger(base, d)

	l.Debug("below the level")
	if l.l != nil || out.Len() > 0 {
		t.Fatalf("a debug line below the level made the logger or wrote %q", out.String())
	}
	l.Info("handled")
	for _, want := range []string{"handled", "delivery=d-1", "binding=tick", "attempt=2", "namespace=ns", "name=w-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log %q lacks %q", out.String(), want)
		}
	}
}
