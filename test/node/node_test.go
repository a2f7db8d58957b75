package node_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

// TestStopLeavesTheMachineAsItWas runs a Pod on a node of its own, then
// stops the node and looks for what the run could have left: processes,
// mounts, the bridge, kube-proxy's rules, the folder.
func TestStopLeavesTheMachineAsItWas(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no node")
	}
	if err := node.CheckMachine(); err != nil && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	forward, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c, err := node.Start(ctx, node.Options{Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	dir := c.Dir()
	t.Logf("node ready in %s", c.StartDuration().Round(time.Millisecond))

	pods := c.Client().CoreV1().Pods("default")
	_, err = pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "pause", Image: node.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ip string
	testenv.WaitFor(t, 2*time.Minute, "the Pod to run", func(context.Context) error {
		p, err := pods.Get(ctx, "sleeper", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
		}
		ip = p.Status.PodIP
		return nil
	})
	_, podNet, _ := net.ParseCIDR(node.PodCIDR)
	if !podNet.Contains(net.ParseIP(ip)) {
		t.Errorf("the Pod's address %s is not in %s", ip, node.PodCIDR)
	}
	if !strings.Contains(mounts(t), dir) {
		t.Fatalf("no mount under %s while a Pod runs: the test could not see one", dir)
	}
	containers := containerPIDs()
	if len(containers) == 0 {
		t.Fatal("no container process while a Pod runs: the test could not see one")
	}

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if m := mounts(t); strings.Contains(m, dir) {
		t.Errorf("mounts left under %s:\n%s", dir, m)
	}
	if _, err := net.InterfaceByName(node.Bridge); err == nil {
		t.Errorf("the bridge %s is still there", node.Bridge)
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if out, _ := exec.Command(save).CombinedOutput(); strings.Contains(string(out), "KUBE-") {
			t.Errorf("the kubelet's or kube-proxy's rules are still there (%s):\n%s", save, out)
		}
	}
	for _, pid := range containers {
		if alive(pid) {
			t.Errorf("container process %d is still running", pid)
		}
	}
	if out, _ := exec.Command("pgrep", "-af", dir).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("processes of the run are still there:\n%s", out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the folder %s is still there (%v)", dir, err)
	}
	if now, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); string(now) != string(forward) {
		t.Errorf("ip_forward is %q after the run, was %q", now, forward)
	}
}

func mounts(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// containerPIDs are the processes in containerd's cgroups (/k8s.io/<id>):
// the containers, pause included.
func containerPIDs() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if strings.Contains(string(cg), ":/k8s.io/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || len(stat) < i+3 || stat[i+2] != 'Z'
}
