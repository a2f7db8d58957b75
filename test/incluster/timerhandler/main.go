// Command timerhandler is the operator of the seed's story, as test/incluster
// runs it in a Pod: one timer binding on a custom resource, held while the
// timer runs (the hold tether.dev/<name>), the kind of handler that Kopf
// leaves holding its objects when it is uninstalled. A tick sets the label
// seed.tether.dev/ticked=true on its object, so that a test sees the timer
// run. It connects to the broker over TLS with its ServiceAccount token, and
// SIGTERM stops it gracefully.
//
//	timerhandler --broker tether-broker.tether-system.svc:7443 --tls-ca-file /etc/tether/ca/ca.crt \
//	  --name gadgets --group seed.tether.dev --version v1 --resource gadgets --namespace gadgets
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/sdk"
)

// TickedLabel is the label a tick sets on its object, "true".
const TickedLabel = "seed.tether.dev/ticked"

func main() {
	broker := flag.String("broker", "", "broker address `HOST:PORT`")
	caFile := flag.String("tls-ca-file", "", "PEM `file` of the CA that signed the broker's certificate")
	serverName := flag.String("tls-server-name", "", "`name` to verify the broker's certificate against (default: the host in --broker)")
	name := flag.String("name", "gadgets", "handler `name`; the hold is tether.dev/<name>")
	group := flag.String("group", "", "API `group` of the resource")
	version := flag.String("version", "v1", "API `version` of the resource")
	resource := flag.String("resource", "", "the resource, plural (`gadgets`)")
	namespace := flag.String("namespace", "", "the `namespace` whose objects it binds (default: all)")
	interval := flag.Duration("interval", 2*time.Second, "the timer's interval")
	flag.Parse()
	if err := run(*broker, *caFile, *serverName, *name, sdk.GVR(*group, *version, *resource), *namespace, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "timerhandler:", err)
		os.Exit(1)
	}
}

func run(broker, caFile, serverName, name string, r sdk.Resource, namespace string, interval time.Duration) error {
	if broker == "" || caFile == "" || r.Resource == "" {
		return errors.New("--broker, --tls-ca-file and --resource are required")
	}
	log := hclog.New(&hclog.LoggerOptions{Name: name, Output: os.Stderr, JSONFormat: true})
	h := sdk.New(name, sdk.WithLogger(log),
		sdk.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}), sdk.WithTLSCAFile(caFile))
	var scope []sdk.BindingOption
	if namespace != "" {
		scope = append(scope, sdk.Namespaces(namespace))
	}
	h.OnTimer(r, interval, func(_ context.Context, ev *sdk.Event) error {
		ev.SetLabel(TickedLabel, "true")
		return nil
	}, scope...)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("connecting to the broker", "broker", broker, "resource", r.Resource, "namespace", namespace)
	return h.Run(ctx, broker)
}
