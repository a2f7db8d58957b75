package controlplane

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// These tests start their own control planes (the package has no TestMain);
// they need the cached binaries and are skipped under -short.

func startForTest(t *testing.T) *ControlPlane {
	t.Helper()
	return startForTestWith(t, Options{})
}

// startForTestWith starts a control plane with opts and logs to the test.
func startForTestWith(t *testing.T, opts Options) *ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	opts.Log = hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Info})
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	return cp
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestStartServesAndStopLeavesNothing(t *testing.T) {
	cp := startForTest(t)
	t.Logf("control plane ready in %s at %s", cp.StartDuration().Round(time.Millisecond), cp.URL())

	// The kubeconfig on disk works on its own, with TLS verified when the
	// generated serving CA allows it.
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeconfig verifies TLS: %v", !cfg.Insecure)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != KubernetesVersion {
		t.Errorf("server version %s, want %s", v.GitVersion, KubernetesVersion)
	}
	if _, err := client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("getting namespace default: %v", err)
	}
	if rc := cp.RESTConfig(); rc.QPS < 100 || rc.BearerToken != cp.AdminToken() {
		t.Errorf("RESTConfig QPS %v token match %v", rc.QPS, rc.BearerToken == cp.AdminToken())
	}

	pids := []int{cp.etcd.cmd.Process.Pid, cp.apiserver.cmd.Process.Pid}
	dir := cp.Dir()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("pid %d still running after Stop", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("folder %s still there after Stop (%v)", dir, err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// helperEnv makes the test binary act as a process that starts a control plane,
// prints the pids and blocks until it is killed.
const helperEnv = "TETHER_CONTROLPLANE_TEST_HELPER"

func TestHelperStartAndBlock(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper process for TestChildrenDieWhenParentIsKilled")
	}
	cp, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("PIDS %d %d\n", cp.etcd.cmd.Process.Pid, cp.apiserver.cmd.Process.Pid)
	select {} // killed by the parent test
}

func TestChildrenDieWhenParentIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a control plane")
	}
	if _, err := Ensure(context.Background(), EnsureOptions{Progress: os.Stderr}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartAndBlock$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := startChild(cmd); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, s := range strings.Fields(f) {
				pid, _ := strconv.Atoi(s)
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) != 2 {
		t.Fatalf("helper printed no pids (scan error %v)", sc.Err())
	}
	for _, pid := range pids {
		if !running(pid) {
			t.Fatalf("pid %d not running before the kill", pid)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waited = true
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 15*time.Second, true,
		func(context.Context) (bool, error) { return !running(pids[0]) && !running(pids[1]), nil })
	if err != nil {
		t.Fatalf("etcd (%d) or kube-apiserver (%d) outlived their SIGKILLed parent: %v", pids[0], pids[1], err)
	}
	// The killed helper could not remove its folder; a later Start would.
	removeStaleTempDirs()
}

// running reports whether pid is a live, non-zombie process.
func running(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestRestartAPIServerKeepsDataAndExpiresOldWatches: after a restart the
// same client reaches the same data, and a watch resumed from before the
// restart is told to relist (410 Gone), which is what tests of a watch gap
// rely on.
func TestRestartAPIServerKeepsDataAndExpiresOldWatches(t *testing.T) {
	cp := startForTest(t)
	ctx := context.Background()
	cms := cp.Client().CoreV1().ConfigMaps("default")
	first, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("the object made before the restart: %v", err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	if err != nil {
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from before the restart: %v, want 410 Gone", err)
		}
		return
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		status, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok || status.Code != http.StatusGone {
			t.Fatalf("watch from before the restart got %s %T, want an error 410 Gone", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch from before the restart: nothing within 30s, want 410 Gone")
	}
}
