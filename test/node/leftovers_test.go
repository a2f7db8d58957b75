package node_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

// helperEnv makes this test binary a node that a test kills: it starts a
// cluster in the folder the variable names, runs a Pod, prints "ready" and
// waits to be killed.
const helperEnv = "TETHER_NODE_HELPER_DIR"

func TestNodeHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("only a helper process of TestStartCleansUpAfterARunThatDied")
	}
	ctx := context.Background()
	c, err := node.Start(ctx, node.Options{Dir: dir, Progress: os.Stderr})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	runPause(t, c)
	fmt.Println("ready")
	select {}
}

// runPause runs a Pod of the pause image and waits until it runs.
func runPause(t *testing.T, c *node.Cluster) {
	pods := c.Client().CoreV1().Pods("default")
	_, err := pods.Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: node.PauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the Pod to run", func(context.Context) error {
		p, err := pods.Get(context.Background(), "sleeper", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
}

// TestStartCleansUpAfterARunThatDied: a run SIGKILLed with a Pod running
// leaves its containers, their shims and its mounts (only its direct
// children die with it); the next Start removes them.
func TestStartCleansUpAfterARunThatDied(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no node")
	}
	if err := node.CheckMachine(); err != nil && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNodeHelperProcess$", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "ready" {
		if strings.HasPrefix(lines.Text(), "error") {
			t.Fatal(lines.Text())
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !strings.Contains(mounts(t), dir) || !processesOf(dir) {
		t.Fatalf("the killed run left no mount or process under %s: the test could not see the cleanup", dir)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := node.Start(ctx, node.Options{Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if m := mounts(t); strings.Contains(m, dir) {
		t.Errorf("mounts of the killed run are left under %s", dir)
	}
	if processesOf(dir) {
		t.Errorf("processes of the killed run are left")
	}
}

// processesOf reports whether a process has dir in its command line.
func processesOf(dir string) bool {
	out, _ := exec.Command("pgrep", "-f", dir).Output()
	return strings.TrimSpace(string(out)) != ""
}
