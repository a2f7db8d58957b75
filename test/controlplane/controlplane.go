package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configures [Start]. The zero value starts a control plane in a new
// temporary folder with the cached binaries.
type Options struct {
	// Log receives the harness's own structured logs (not the processes'
	// output). Nil: none.
	Log hclog.Logger
	// Binaries are the etcd and kube-apiserver to run. Zero: [Ensure] with the
	// default cache folder, building them if needed.
	Binaries Binaries
	// Progress receives build progress when Binaries is zero and a build is
	// needed. Nil: os.Stderr (a first build takes about 10 minutes).
	Progress io.Writer
	// Dir holds the etcd data, the generated keys and certificates, the
	// kubeconfig and, by default, the process logs. Zero: a new temporary
	// folder that Stop removes. A given Dir is left in place by Stop.
	Dir string
	// StartTimeout bounds the start, from launching etcd to a ready API server.
	// Zero: 60s.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits for each process after SIGTERM before
	// it sends SIGKILL. Zero: 10s.
	StopTimeout time.Duration
	// EtcdVia, when set, is called once etcd is up with the address it
	// serves clients on (host:port), and returns the address kube-apiserver
	// is to reach it at instead: a proxy the caller runs, to cut or slow
	// that path. The harness itself (RestartEtcd, Compact) goes to etcd
	// directly. Nil: kube-apiserver reaches etcd directly.
	EtcdVia func(etcdAddr string) (string, error)
	// Address is the IPv4 address kube-apiserver serves on and advertises as
	// the endpoint of the default namespace's kubernetes Service, which it
	// then keeps (the lease endpoint reconciler). Zero: 127.0.0.1, and the
	// Service has no endpoints. A one-node cluster gives the address of its
	// Pod bridge, which Pods can reach and loopback is not.
	Address string
	// APIServerArgs are added to kube-apiserver's command line after the
	// harness's own flags, which they override.
	APIServerArgs []string
	// Stdout and Stderr receive the output of etcd and kube-apiserver. Nil:
	// the files etcd.log and kube-apiserver.log in Dir. Either way, when the
	// start fails the error ends with the tail of the process's output.
	Stdout, Stderr io.Writer
}

// ControlPlane is a running etcd and kube-apiserver. It is safe for concurrent
// use; Stop ends it.
type ControlPlane struct {
	log        hclog.Logger
	dir        string
	removeDir  bool
	url        string
	token      string
	kubeconfig string
	bins       Binaries
	rest       *rest.Config
	client     kubernetes.Interface
	startTook  time.Duration
	stopGrace  time.Duration

	// opts, apiEtcdURL and apiPort are what the API server is started
	// with, again on RestartAPIServer; etcdURL and peerURL what etcd is
	// started with, again on RestartEtcd. apiEtcdURL is etcdURL unless
	// Options.EtcdVia put a proxy between them.
	opts                         Options
	etcdURL, peerURL, apiEtcdURL string
	apiPort                      int

	mu              sync.Mutex // guards etcd, apiserver and apiTail
	etcd, apiserver *Process
	apiTail         *tailBuffer // the last output of apiserver
	files           []*os.File

	stopOnce sync.Once
	stopErr  error
}

// errPortTaken marks a start that failed because a chosen port was taken in
// the meantime; Start then retries with new ports.
var errPortTaken = errors.New("a chosen port was taken by another process")

// Start launches etcd and kube-apiserver on free loopback ports, waits until
// the API server reports ready and writes an admin kubeconfig. The processes
// die with the calling process however it ends; call Stop to end them sooner.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 10 * time.Second
	}
	if opts.Address == "" {
		opts.Address = "127.0.0.1"
	}
	if opts.Binaries.IsZero() {
		b, err := Ensure(ctx, EnsureOptions{Progress: opts.Progress, Log: opts.Log.Named("ensure")})
		if err != nil {
			return nil, fmt.Errorf("starting the control plane: %w", err)
		}
		opts.Binaries = b
	}

	cp := &ControlPlane{log: opts.Log, dir: opts.Dir, bins: opts.Binaries, stopGrace: opts.StopTimeout}
	if cp.dir == "" {
		removeStaleTempDirs()
		d, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tempDirPrefix, os.Getpid()))
		if err != nil {
			return nil, fmt.Errorf("creating the control plane's temporary folder: %w", err)
		}
		cp.dir, cp.removeDir = d, true
	} else if err := os.MkdirAll(cp.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the control plane's folder: %w", err)
	}
	started := false
	defer func() {
		if !started {
			_ = cp.Stop()
		}
	}()

	if err := cp.prepare(); err != nil {
		return nil, err
	}
	begin := time.Now()
	for attempt := 1; ; attempt++ {
		err := cp.launch(ctx, opts)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return nil, err
		}
		cp.log.Warn("port taken while starting; retrying with new ports", "attempt", attempt, "error", err)
		cp.stopProcesses()
	}
	cp.startTook = time.Since(begin)
	started = true
	cp.log.Info("control plane ready", "url", cp.url, "took", cp.startTook.Round(time.Millisecond), "dir", cp.dir)
	return cp, nil
}

// prepare writes the service-account keys and the admin token file.
func (cp *ControlPlane) prepare() error {
	if err := writeServiceAccountKeys(cp.path("sa.key"), cp.path("sa.pub")); err != nil {
		return fmt.Errorf("preparing the control plane: %w", err)
	}
	tok, err := randomHex(24)
	if err != nil {
		return fmt.Errorf("generating the admin token: %w", err)
	}
	cp.token = tok
	if err := writeTokenFile(cp.path("tokens.csv"), tok); err != nil {
		return fmt.Errorf("preparing the control plane: %w", err)
	}
	return nil
}

// logFile opens (for appending) the default log file of a process.
func (cp *ControlPlane) logFile(name string) (*os.File, error) {
	f, err := os.OpenFile(cp.path(name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log file of %s: %w", name, err)
	}
	cp.files = append(cp.files, f)
	return f, nil
}

func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.dir, name) }

// launch starts etcd and kube-apiserver on fresh ports and waits for both.
func (cp *ControlPlane) launch(ctx context.Context, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	ports, err := FreePorts(3)
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	cp.opts, cp.apiPort = o, ports[2]
	cp.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	cp.peerURL = "http://127.0.0.1:" + strconv.Itoa(ports[1])
	cp.url = "https://" + net.JoinHostPort(o.Address, strconv.Itoa(ports[2]))

	if err := os.RemoveAll(cp.path("etcd")); err != nil {
		return fmt.Errorf("clearing the etcd data folder: %w", err)
	}
	etcd, err := cp.startEtcd(ctx, cp.etcdURL)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.etcd = etcd
	cp.mu.Unlock()
	cp.apiEtcdURL = cp.etcdURL
	if o.EtcdVia != nil {
		via, err := o.EtcdVia(strings.TrimPrefix(cp.etcdURL, "http://"))
		if err != nil {
			return fmt.Errorf("starting the control plane: the way to etcd: %w", err)
		}
		cp.apiEtcdURL = "http://" + via
	}
	if err := cp.startAPIServer(ctx); err != nil {
		return err
	}
	return cp.writeClientConfig()
}

// startAPIServer starts kube-apiserver against the running etcd on the
// chosen port and waits until it reports ready.
func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	tail := newTailBuffer(8 << 10)
	reconciler := "none" // loopback is no endpoint for Pods
	if cp.opts.Address != "127.0.0.1" {
		reconciler = "lease"
	}
	args := []string{
		"--etcd-servers", cp.apiEtcdURL,
		"--cert-dir", cp.path("certs"),
		"--secure-port", strconv.Itoa(cp.apiPort),
		"--bind-address", cp.opts.Address,
		"--advertise-address", cp.opts.Address,
		"--endpoint-reconciler-type", reconciler,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", cp.path("sa.pub"),
		"--service-account-signing-key-file", cp.path("sa.key"),
		"--token-auth-file", cp.path("tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-cluster-ip-range", "10.0.0.0/24",
	}
	p, err := cp.run(cp.opts, "kube-apiserver", tail, cp.opts.Binaries.KubeAPIServer, append(args, cp.opts.APIServerArgs...)...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.apiserver, cp.apiTail = p, tail
	cp.mu.Unlock()
	return cp.awaitAPIServer(ctx, p, tail)
}

// awaitAPIServer waits until the API server process p reports ready.
func (cp *ControlPlane) awaitAPIServer(ctx context.Context, p *Process, tail *tailBuffer) error {
	tlsClient := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // only to poll readiness; the kubeconfig verifies
	}
	defer tlsClient.CloseIdleConnections()
	if err := waitUntil(ctx, p, tail, func(ctx context.Context) error {
		return probe(ctx, tlsClient, cp.url+"/readyz", cp.token, "ok")
	}); err != nil {
		return fmt.Errorf("waiting for kube-apiserver at %s to be ready: %w", cp.url, err)
	}
	return nil
}

// RestartAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after the
// stop timeout, as a crash) and starts it again on the same port against the same etcd,
// with the same certificates, so clients reconnect without new
// configuration. It returns once the new API server is ready. Its watch
// cache starts from the current state, so a watch that resumes from an
// older resource version is answered 410 Gone and must relist.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	p := cp.apiserver
	cp.mu.Unlock()
	if err := cp.stopToRestart(p, "kube-apiserver"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cp.opts.StartTimeout)
	defer cancel()
	if err := cp.startAPIServer(ctx); err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	cp.log.Info("kube-apiserver restarted", "url", cp.url)
	return nil
}

// stopToRestart stops p, the process named what (SIGTERM, then SIGKILL
// after the stop timeout), so that it can be started again. Killed after
// the timeout (long requests still draining) is a crash, which a restart
// follows too.
func (cp *ControlPlane) stopToRestart(p *Process, what string) error {
	if p == nil {
		return fmt.Errorf("restarting %s: the control plane is stopped", what)
	}
	if err := p.Stop(cp.stopGrace); err != nil {
		if !p.Exited() {
			return fmt.Errorf("restarting %s: %w", what, err)
		}
		cp.log.Warn(what+" restart", "error", err)
	}
	return nil
}

// run starts one control-plane process with its output going to the
// configured writers and to tail.
func (cp *ControlPlane) run(o Options, name string, tail *tailBuffer, bin string, args ...string) (*Process, error) {
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil || stderr == nil {
		f, err := cp.logFile(name)
		if err != nil {
			return nil, fmt.Errorf("starting the control plane: %w", err)
		}
		if stdout == nil {
			stdout = f
		}
		if stderr == nil {
			stderr = f
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = cp.dir
	cmd.Stdout = io.MultiWriter(stdout, tail)
	cmd.Stderr = io.MultiWriter(stderr, tail)
	cp.log.Debug("starting", "process", name, "args", strings.Join(args, " "))
	p, err := StartProcess(name, cmd)
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	return p, nil
}

// waitUntil polls check every 50ms until it succeeds, p exits or ctx ends.
// Errors carry the tail of the process's output.
func waitUntil(ctx context.Context, p *Process, tail *tailBuffer, check func(context.Context) error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.Done():
			return withTail(fmt.Errorf("%s exited: %v", p.Name(), p.Err()), tail)
		case <-ctx.Done():
			return withTail(fmt.Errorf("%w (last check: %v)", ctx.Err(), last), tail)
		case <-tick.C:
		}
	}
}

// withTail appends the last lines of a process's output to err and marks it
// errPortTaken when the output says a port was in use.
func withTail(err error, tail *tailBuffer) error {
	out := tail.String()
	if strings.Contains(out, "address already in use") {
		err = fmt.Errorf("%w: %w", errPortTaken, err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return fmt.Errorf("%w\n--- last output ---\n%s", err, strings.Join(lines, "\n"))
}

// probe GETs url and requires a 200 whose body contains want.
func probe(ctx context.Context, c *http.Client, url, token, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// writeClientConfig writes the kubeconfig and builds the REST config and
// client, trusting the generated serving CA when it verifies.
func (cp *ControlPlane) writeClientConfig() error {
	ca, ok := servingCA(cp.path("certs"), cp.url)
	if !ok {
		cp.log.Warn("the generated serving certificate does not verify; the kubeconfig skips TLS verification")
		ca = nil
	}
	cp.kubeconfig = cp.path("kubeconfig")
	if err := writeKubeconfig(cp.kubeconfig, cp.url, cp.token, ca); err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	cfg := &rest.Config{
		Host:        cp.url,
		BearerToken: cp.token,
		QPS:         200,
		Burst:       400,
	}
	if ca != nil {
		cfg.CAData = ca
	} else {
		cfg.Insecure = true
	}
	cp.rest = cfg
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return fmt.Errorf("creating the admin client: %w", err)
	}
	cp.client = client
	return nil
}

// Stop ends kube-apiserver and etcd (SIGTERM, then SIGKILL after the stop
// timeout) and removes the temporary folder if Start created it. It may be
// called more than once; later calls return the first result.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		errs := cp.stopProcesses()
		for _, f := range cp.files {
			_ = f.Close()
		}
		if cp.removeDir {
			if err := os.RemoveAll(cp.dir); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", cp.dir, err))
			}
		}
		cp.stopErr = errors.Join(errs...)
		if cp.stopErr != nil {
			cp.stopErr = fmt.Errorf("stopping the control plane: %w", cp.stopErr)
		}
		cp.log.Info("control plane stopped", "error", cp.stopErr)
	})
	return cp.stopErr
}

// stopProcesses stops the API server first, then etcd.
func (cp *ControlPlane) stopProcesses() []error {
	cp.mu.Lock()
	procs := []*Process{cp.apiserver, cp.etcd}
	cp.apiserver, cp.etcd = nil, nil
	cp.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if err := p.Stop(cp.stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
