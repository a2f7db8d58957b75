package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker/relay"
)

// relayCmd runs the admission relay beside a broker in its Pod (package
// broker/relay).
func relayCmd(args []string, _, stderr io.Writer) error {
	var opts relay.Options
	var peers relay.DNSPeers
	var logLevel, logFormat string
	fs := flag.NewFlagSet("broker relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: broker relay [flags]\n\n"+
			"Listens on the broker Pod's admission port and forwards each connection, byte for\n"+
			"byte (TLS stays between the API server and a broker), to the broker's admission\n"+
			"listener in the same Pod (--local); while that refuses (the broker's process died,\n"+
			"and the kubelet has not yet taken the Pod out of the Service's endpoints), to another\n"+
			"replica's admission listener, found from --peers. Run as a second container of the\n"+
			"broker's Pod, with the broker's --admission-listen on another port.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.Listen, "listen", relay.DefaultListen, "address HOST:PORT to accept connections on: the port the admission Services target")
	fs.StringVar(&opts.Local, "local", relay.DefaultLocal, "the broker's --admission-listen in this Pod")
	fs.StringVar(&peers.Name, "peers", "", "DNS name whose addresses are every ready replica (the headless Service tether-broker-replicas);\n"+
		"empty: no peers, a connection the local broker refuses is closed")
	fs.IntVar(&peers.Port, "peer-port", 8444, "the port of the other replicas' --admission-listen (not their relay's, so that no connection goes round)")
	fs.StringVar(&peers.Own, "pod-ip", envOr("POD_IP", ""), "this Pod's address, left out of --peers' (default $POD_IP)")
	fs.DurationVar(&opts.DialTimeout, "dial-timeout", relay.DefaultDialTimeout, "how long each dial, and the lookup of --peers, may take")
	fs.DurationVar(&opts.Drain, "drain", relay.DefaultDrain, "after SIGTERM, how long to keep accepting connections, for the Pod's removal from the endpoints to reach\n"+
		"the API server and every node (forwarded to a peer once the local broker stopped); then connections to a peer are closed\n"+
		"once idle for "+relay.DefaultQuiet.String()+", those to the local broker once it ended them, and the relay exits (0: none)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.StringVar(&logFormat, "log-format", "auto", "log format: text, json, or auto (json inside a cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if hclog.LevelFromString(logLevel) == hclog.NoLevel {
		return fmt.Errorf("--log-level: unknown level %q", logLevel)
	}
	if opts.DialTimeout <= 0 {
		return errors.New("--dial-timeout must be positive")
	}
	if opts.Drain == 0 {
		opts.Drain = -1 // the flag's 0 is none; the library's is the default
	}
	opts.Log = newLogger(logLevel, logFormat, stderr).Named("relay")
	if peers.Name != "" {
		opts.Peers = peers
	}
	r := relay.New(opts)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return r.Start(ctx)
}
