package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/test/controlplane"
)

// The environment of the handler under test (test/conformance/README.md).
const (
	envBroker    = "TETHER_BROKER"
	envInsecure  = "TETHER_INSECURE"
	envHandler   = "TETHER_HANDLER"
	envNamespace = "TETHER_NAMESPACE"
)

const (
	handlerName = "conformance"
	namespace   = "conformance"
	// brokerNamespace keeps the broker's Leases and admission certificates.
	brokerNamespace = "tether-system"
	// kitUser is who the kit acts as: not the broker's identity, whose own
	// writes the webhooks let through unreviewed.
	kitUser = "conformance-kit"
	// waitFor bounds every wait of a scenario; nothing waits this long when
	// the handler follows the protocol.
	waitFor = 30 * time.Second
)

// options say what to run the kit against.
type options struct {
	command  []string  // starts the handler under test
	dir      string    // logs: the control plane's, the broker's, the handler's
	progress io.Writer // a line per step, and one per rule
	// hideCapabilities makes the handler and the broker each meet a peer
	// older than capabilities (wire.hideCapabilities).
	hideCapabilities bool
}

// kit is one run: the cluster, the broker, the proxy and the handler.
type kit struct {
	opts options
	cp   *controlplane.ControlPlane
	dyn  dynamic.Interface // as kitUser
	// stopBroker stops the broker running now (restartBroker replaces it).
	stopBroker func()
	client     kubernetes.Interface
	wire       *wire
	handler    *exec.Cmd
	done       chan struct{} // closed when the handler has exited
	exitErr    error         // how it exited, once done is closed
	// windowed is the session on which the handler's window is smaller
	// than the broker's (window.bound), which window.over judges too.
	windowed *stream
	// handback says which delivery the kit sent after the Goodbye; nil:
	// no Goodbye reached the proxy.
	handback *handback
	// relaunched is the first stream of the handler started again
	// (status.permanent): the streams before it are the first process's.
	relaunched int
}

// run starts a control plane, the broker and the handler under test, plays
// every scenario and returns the report; everything it started is stopped
// before it returns.
func run(ctx context.Context, opts options) (*report, error) {
	// The log folder, and in it the one the daemon of scenario session
	// beats in (daemon.session).
	if err := os.MkdirAll(filepath.Join(opts.dir, "beats"), 0o755); err != nil {
		return nil, fmt.Errorf("making the log folder: %w", err)
	}
	fmt.Fprintf(opts.progress, "conformance: logs in %s\n", opts.dir)
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(opts.dir, "controlplane"), Progress: opts.progress})
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	k := &kit{opts: opts, cp: cp, client: cp.Client()}
	asKit := rest.CopyConfig(cp.RESTConfig())
	asKit.Impersonate = rest.ImpersonationConfig{UserName: kitUser, Groups: []string{"system:masters", "system:authenticated"}}
	if k.dyn, err = dynamic.NewForConfig(asKit); err != nil {
		return nil, fmt.Errorf("making a client: %w", err)
	}
	if err := controlplane.InstallWidgetCRD(ctx, k.dyn, waitFor); err != nil {
		return nil, err
	}
	for _, ns := range []string{namespace, brokerNamespace} {
		if _, err := k.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating the namespace %s: %w", ns, err)
		}
	}
	var brokerAddr string
	if k.stopBroker, brokerAddr, err = startBroker(ctx, cp, opts.dir, "broker.log"); err != nil {
		return nil, err
	}
	defer func() { k.stopBroker() }()
	if k.wire, err = newWire(brokerAddr, opts.hideCapabilities); err != nil {
		return nil, err
	}
	defer k.wire.stop()
	if err := k.startHandler("handler.log"); err != nil {
		return nil, err
	}
	defer k.killHandler()
	return k.play(ctx), nil
}

// startBroker runs the broker in this process, plain text, with short
// backoffs so that retries come quickly, serving admission reviews; its log
// goes to dir/logName.
func startBroker(ctx context.Context, cp *controlplane.ControlPlane, dir, logName string) (stop func(), addr string, err error) {
	logFile, err := os.Create(filepath.Join(dir, logName))
	if err != nil {
		return nil, "", fmt.Errorf("creating the broker's log: %w", err)
	}
	b, err := broker.New(broker.Options{
		Log:       hclog.New(&hclog.LoggerOptions{Name: "broker", Level: hclog.Debug, Output: logFile}),
		Config:    cp.RESTConfig(),
		Listen:    "127.0.0.1:0",
		Insecure:  true,
		Defaults:  binding.Defaults{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second, Timeout: 10 * time.Second},
		Namespace: brokerNamespace,
		Admission: broker.Admission{Listen: "127.0.0.1:0"},
	})
	if err == nil {
		err = b.Listen()
	}
	if err != nil {
		logFile.Close()
		return nil, "", fmt.Errorf("starting the broker: %w", err)
	}
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Start(bctx) }()
	return func() {
		cancel()
		<-done
		logFile.Close()
	}, b.Addr().String(), nil
}

// restartBroker stops the broker and starts a new one, its log in
// dir/logName, to which the proxy then forwards new streams.
func (k *kit) restartBroker(ctx context.Context, logName string) error {
	k.stopBroker()
	k.stopBroker = func() {}
	stop, addr, err := startBroker(ctx, k.cp, k.opts.dir, logName)
	if err != nil {
		return err
	}
	k.stopBroker = stop
	return k.wire.forwardTo(addr)
}

// startHandler runs the command under test with the environment the
// README promises, its output in dir/logName.
func (k *kit) startHandler(logName string) error {
	out, err := os.Create(filepath.Join(k.opts.dir, logName))
	if err != nil {
		return fmt.Errorf("creating the handler's log: %w", err)
	}
	cmd := exec.Command(k.opts.command[0], k.opts.command[1:]...)
	cmd.Env = append(os.Environ(), envBroker+"="+k.wire.addr, envInsecure+"=true", envHandler+"="+handlerName,
		envNamespace+"="+namespace, envHandlerDir+"="+k.handlerDir())
	cmd.Stdout, cmd.Stderr = out, out
	// In a process group of its own that the kernel kills with the kit: a
	// kit killed mid-run must not leave the handler retrying forever (seen:
	// one held the machine's test lock for 20 minutes).
	p, err := controlplane.StartProcess("the handler under test", cmd)
	if err != nil {
		out.Close()
		return fmt.Errorf("starting the handler %q: %w", k.opts.command, err)
	}
	done := make(chan struct{}) // this process's, not the next one's
	k.handler, k.done = cmd, done
	go func() {
		<-p.Done()
		k.exitErr = p.Err()
		out.Close()
		close(done)
	}()
	return nil
}

// killHandler ends the handler if it still runs.
func (k *kit) killHandler() {
	select {
	case <-k.done:
	default:
		_ = k.handler.Process.Signal(syscall.SIGKILL)
		<-k.done
	}
}
