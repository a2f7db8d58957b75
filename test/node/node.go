package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/controlplane"
)

// Options configures [Start]. The zero value starts a one-node cluster in a
// new temporary folder with the cached binaries, building them if needed.
type Options struct {
	// Log receives the harness's own structured logs. Nil: none.
	Log hclog.Logger
	// Progress receives build progress (a first build of everything takes
	// about 20 minutes on 2 cores). Nil: os.Stderr.
	Progress io.Writer
	// Dir holds every process's files and logs (logs/NAME.log). Zero: a new
	// temporary folder that Stop removes. A given Dir is left in place.
	Dir string
	// StartTimeout bounds the start, from the first process to a Ready node
	// (builds excluded). Zero: 3 minutes.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits for each process after SIGTERM.
	// Zero: 10s.
	StopTimeout time.Duration
}

// Cluster is a running one-node cluster: the control plane (embedded: its
// Client, RESTConfig, KubeconfigPath and Namespace are the cluster's),
// kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy
// and CoreDNS. Stop ends it.
type Cluster struct {
	*controlplane.ControlPlane

	log                   hclog.Logger
	dir                   string
	removeDir             bool
	stopGrace             time.Duration
	nodeBins              controlplane.NodeBinaries
	containerdDir         string
	lock                  *machineLock
	net                   *network
	containerd, kubelet   *controlplane.Process
	proxy, kcm, scheduler *controlplane.Process
	dns                   *controlplane.Process
	proxyConfig           string
	startTook             time.Duration
	stopped               bool
}

// Start checks the machine, builds what is missing, and starts a one-node
// cluster; it returns once the node is Ready and the default service
// account exists. Only one runs on a machine at a time (they share the
// bridge and the kubelet's port): a second Start waits for the first to
// stop, saying so on Progress. The
// processes die with the calling process however it ends; a later Start
// removes what such a run left behind.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 10 * time.Second
	}
	if err := CheckMachine(); err != nil {
		return nil, err
	}
	ensure := controlplane.EnsureOptions{Progress: opts.Progress, Log: opts.Log.Named("ensure")}
	cpBins, err := controlplane.Ensure(ctx, ensure)
	if err != nil {
		return nil, fmt.Errorf("starting a node: %w", err)
	}
	nodeBins, err := controlplane.EnsureNode(ctx, ensure)
	if err != nil {
		return nil, fmt.Errorf("starting a node: %w", err)
	}
	lock, err := lockMachine(ctx, opts.Progress)
	if err != nil {
		return nil, err
	}
	c := &Cluster{log: opts.Log, dir: opts.Dir, stopGrace: opts.StopTimeout, nodeBins: nodeBins, lock: lock}
	started := false
	defer func() {
		if !started {
			_ = c.Stop()
		}
	}()
	if err := removeLeftovers(opts.Log, lock.previous); err != nil {
		return nil, err
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", runDirPrefix)
		if err != nil {
			return nil, fmt.Errorf("making the node's folder: %w", err)
		}
		c.dir, c.removeDir = d, true
	}
	lock.record(c.dir)
	images, err := buildImages(ctx, filepath.Join(c.dir, "images"), opts.Progress)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	begin := time.Now()
	if c.net, err = setupNetwork(c.dir); err != nil {
		return nil, err
	}
	c.ControlPlane, err = controlplane.Start(ctx, controlplane.Options{
		Log:      opts.Log.Named("controlplane"),
		Binaries: cpBins,
		Dir:      filepath.Join(c.dir, "controlplane"),
		Address:  Address,
		APIServerArgs: []string{
			// Webhooks and aggregated APIs are called at a Service's
			// endpoints: the API server runs outside the Pod network.
			"--enable-aggregator-routing=true",
			"--kubelet-preferred-address-types=InternalIP",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("starting a node: %w", err)
	}
	if err := c.startContainerd(ctx, images); err != nil {
		return nil, err
	}
	if err := c.startKubernetes(ctx); err != nil {
		return nil, err
	}
	if err := c.awaitReady(ctx); err != nil {
		return nil, err
	}
	c.startTook = time.Since(begin)
	started = true
	c.log.Info("node ready", "node", NodeName, "took", c.startTook.Round(time.Millisecond), "dir", c.dir)
	return c, nil
}

// startContainerd starts containerd with the run's configuration and
// imports the images into it.
func (c *Cluster) startContainerd(ctx context.Context, images []string) error {
	c.containerdDir = filepath.Join(c.dir, "containerd")
	config, err := writeFile(c.containerdDir, "config.toml",
		containerdConfig(c.containerdDir, runcPath, cniBinDir, c.net.confDir))
	if err != nil {
		return err
	}
	// containerd finds its shim on PATH.
	env := append(os.Environ(), "PATH="+c.nodeBins.Dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if c.containerd, err = c.run("containerd", env, c.nodeBins.Containerd, "--config", config); err != nil {
		return err
	}
	if err := c.awaitContainerd(ctx); err != nil {
		return fmt.Errorf("waiting for containerd: %w", err)
	}
	for _, img := range images {
		if err := c.ImportImage(ctx, img); err != nil {
			return err
		}
	}
	return nil
}

// startKubernetes starts the controller manager, the scheduler, kube-proxy
// and the kubelet.
func (c *Cluster) startKubernetes(ctx context.Context) error {
	kubeconfig := c.KubeconfigPath()
	cpDir := c.ControlPlane.Dir()
	var err error
	if c.kcm, err = c.run("kube-controller-manager", nil, c.nodeBins.ControllerManager,
		controllerManagerArgs(kubeconfig, filepath.Join(cpDir, "sa.key"), filepath.Join(cpDir, "certs", "apiserver.crt"))...); err != nil {
		return err
	}
	if c.scheduler, err = c.run("kube-scheduler", nil, c.nodeBins.Scheduler, schedulerArgs(kubeconfig)...); err != nil {
		return err
	}
	ports, err := controlplane.FreePorts(4)
	if err != nil {
		return err
	}
	if c.proxyConfig, err = writeFile(filepath.Join(c.dir, "kube-proxy"), "config.yaml", proxyConfig(kubeconfig, ports[0], ports[1])); err != nil {
		return err
	}
	if c.proxy, err = c.run("kube-proxy", nil, c.nodeBins.Proxy, "--config", c.proxyConfig); err != nil {
		return err
	}
	kubeletDir := filepath.Join(c.dir, "kubelet")
	if _, err := writeFile(kubeletDir, "config.yaml", kubeletConfig(kubeletDir, socketIn(c.containerdDir), ports[2])); err != nil {
		return err
	}
	if c.kubelet, err = c.run("kubelet", nil, c.nodeBins.Kubelet, kubeletArgs(kubeletDir, kubeconfig)...); err != nil {
		return err
	}
	return c.startDNS(ctx, kubeconfig, ports[3])
}

// startDNS starts CoreDNS and waits until it has listed the Services.
func (c *Cluster) startDNS(ctx context.Context, kubeconfig string, readyPort int) error {
	conf, err := writeFile(filepath.Join(c.dir, "coredns"), "Corefile", corefile(kubeconfig, readyPort))
	if err != nil {
		return err
	}
	if c.dns, err = c.run("coredns", nil, c.nodeBins.CoreDNS, "-conf", conf); err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort)
	if err := c.waitFor(ctx, c.dns, func(ctx context.Context) error { return get(ctx, url) }); err != nil {
		return fmt.Errorf("waiting for CoreDNS: %w", err)
	}
	return nil
}

// get requires a 200 from url.
func get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// awaitReady waits until the node reports Ready and the controller manager
// has made the default namespace's service account, without which no Pod
// is admitted.
func (c *Cluster) awaitReady(ctx context.Context) error {
	client := c.Client()
	ready := func(ctx context.Context) error {
		n, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s not ready: %s", NodeName, cond.Message)
			}
		}
		if _, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		return nil
	}
	for _, p := range []*controlplane.Process{c.kubelet, c.kcm} {
		if err := c.waitFor(ctx, p, ready); err != nil {
			return fmt.Errorf("waiting for node %s to be ready: %w", NodeName, err)
		}
	}
	return nil
}

// Dir is the folder of the run.
func (c *Cluster) Dir() string { return c.dir }

// StartDuration is how long the start took from the bridge to a Ready node,
// builds excluded.
func (c *Cluster) StartDuration() time.Duration { return c.startTook }

// LogPath is the log file of a process of the node ("kubelet",
// "containerd", "kube-proxy", "kube-controller-manager", "kube-scheduler").
func (c *Cluster) LogPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

// run starts a node process with its output in logs/NAME.log.
func (c *Cluster) run(name string, env []string, bin string, args ...string) (*controlplane.Process, error) {
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("making the log folder: %w", err)
	}
	f, err := os.OpenFile(c.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = c.dir, env, f, f
	c.log.Debug("starting", "process", name, "args", strings.Join(args, " "))
	p, err := controlplane.StartProcess(name, cmd)
	if err != nil {
		return nil, fmt.Errorf("starting the node: %w", err)
	}
	return p, nil
}

// waitFor polls check every 100ms until it succeeds, p exits or ctx ends.
// Errors carry the end of p's log.
func (c *Cluster) waitFor(ctx context.Context, p *controlplane.Process, check func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited: %v\n%s", p.Name(), p.Err(), c.logTail(p.Name()))
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)\n%s", ctx.Err(), last, c.logTail(p.Name()))
		case <-tick.C:
		}
	}
}

// logTail is the last lines of a process's log, for errors.
func (c *Cluster) logTail(name string) string {
	data, _ := os.ReadFile(c.LogPath(name))
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "--- last output of " + name + " ---\n" + strings.Join(lines, "\n")
}

// Stop ends the node and the control plane: the kubelet first, then every
// container, containerd, kube-proxy (and its iptables rules), the
// controllers and the control plane; it unmounts what the Pods mounted,
// removes the bridge and, if Start made it, the folder. Later calls do
// nothing.
func (c *Cluster) Stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	stop := func(p *controlplane.Process) {
		if err := p.Stop(c.stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	stop(c.kubelet)
	if c.kubelet != nil {
		removeKubeletRules()
	}
	stop(c.dns)
	killContainers(c.dir)
	stop(c.containerd)
	stop(c.proxy)
	if c.proxyConfig != "" {
		if out, err := exec.Command(c.nodeBins.Proxy, "--cleanup", "--config", c.proxyConfig).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing kube-proxy's rules: %w: %s", err, out))
		}
	}
	stop(c.kcm)
	stop(c.scheduler)
	if c.ControlPlane != nil {
		if err := c.ControlPlane.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.dir != "" {
		if err := unmountUnder(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if c.net != nil {
		if err := c.net.teardown(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.removeDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.dir, err))
		}
	}
	if c.lock != nil {
		c.lock.release()
	}
	err := errors.Join(errs...)
	if err != nil {
		err = fmt.Errorf("stopping the node: %w", err)
	}
	c.log.Info("node stopped", "error", err)
	return err
}
