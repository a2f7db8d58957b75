package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The node's network. Pods get addresses on one bridge of the run's own; the
// bridge's address is the node's: kube-apiserver serves there (Pods reach it
// through the kubernetes Service) and so does the kubelet. Nothing the run
// starts listens on or sends to any other interface but loopback.
const (
	// Bridge is the Linux bridge the Pods are attached to.
	Bridge = "tether0"
	// PodCIDR is the range Pods get their addresses from.
	PodCIDR = "10.244.0.0/24"
	// Address is the bridge's own address: the node's InternalIP, where
	// kube-apiserver and the kubelet serve.
	Address = "10.244.0.1"
	// ServiceCIDR is the range of Service ClusterIPs, as the control plane
	// harness sets it.
	ServiceCIDR = "10.0.0.0/24"
	// networkName names the CNI network (and host-local's state folder).
	networkName = "tether"
)

// sysctls are what the node needs set, and were before the run, in order.
var sysctls = []string{
	"net/ipv4/ip_forward",                // a Service's traffic is routed from Pod to Pod
	"net/bridge/bridge-nf-call-iptables", // kube-proxy's rules see bridged traffic
}

// network is the bridge, the sysctls and the CNI configuration of one run.
type network struct {
	confDir string            // the CNI configuration folder containerd reads
	saved   map[string]string // sysctl values from before the run
}

// setupNetwork makes the bridge with the node's address, sets the sysctls
// and writes the CNI configuration into dir/cni. A bridge left by a run that
// died is removed first.
func setupNetwork(dir string) (*network, error) {
	n := &network{confDir: filepath.Join(dir, "cni"), saved: map[string]string{}}
	if _, err := net.InterfaceByName(Bridge); err == nil {
		if err := ipCmd("link", "del", Bridge); err != nil {
			return nil, fmt.Errorf("removing the bridge a previous run left: %w", err)
		}
	}
	for _, args := range [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", Address + "/24", "dev", Bridge},
		{"link", "set", Bridge, "up"},
	} {
		if err := ipCmd(args...); err != nil {
			n.teardown()
			return nil, fmt.Errorf("making the bridge %s: %w", Bridge, err)
		}
	}
	for _, key := range sysctls {
		old, err := readSysctl(key)
		if err != nil {
			n.teardown()
			return nil, err
		}
		n.saved[key] = old
		if err := writeSysctl(key, "1"); err != nil {
			n.teardown()
			return nil, err
		}
	}
	if err := writeCNIConfig(n.confDir, filepath.Join(dir, "cni-state")); err != nil {
		n.teardown()
		return nil, err
	}
	return n, nil
}

// teardown removes the bridge (its Pods' veths went with their network
// namespaces) and puts the sysctls back.
func (n *network) teardown() error {
	var errs []error
	if _, err := net.InterfaceByName(Bridge); err == nil {
		if err := ipCmd("link", "del", Bridge); err != nil {
			errs = append(errs, fmt.Errorf("removing the bridge: %w", err))
		}
	}
	for key, old := range n.saved {
		if err := writeSysctl(key, old); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeCNIConfig writes the network configuration: a bridge that is the
// Pods' gateway, host-local addresses kept in stateDir, and portmap for
// hostPort.
func writeCNIConfig(confDir, stateDir string) error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       networkName,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      Bridge,
				"isGateway":   true,
				"hairpinMode": true, // a Pod reaches itself through its Service
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": stateDir,
					"ranges":  [][]map[string]string{{{"subnet": PodCIDR, "gateway": Address}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return fmt.Errorf("making the CNI configuration folder: %w", err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-tether.conflist"), data, 0o644); err != nil {
		return fmt.Errorf("writing the CNI configuration: %w", err)
	}
	return nil
}

// kubeletRules are the iptables rules and chains the kubelet makes and never
// removes, as arguments that delete them: the jumps first, then the chains.
var kubeletRules = [][]string{
	{"-t", "filter", "-D", "INPUT", "-j", "KUBE-FIREWALL"},
	{"-t", "filter", "-D", "OUTPUT", "-j", "KUBE-FIREWALL"},
	{"-t", "filter", "-F", "KUBE-FIREWALL"},
	{"-t", "filter", "-X", "KUBE-FIREWALL"},
	{"-t", "mangle", "-X", "KUBE-IPTABLES-HINT"},
	{"-t", "mangle", "-X", "KUBE-KUBELET-CANARY"},
	{"-t", "nat", "-X", "KUBE-KUBELET-CANARY"},
	{"-t", "filter", "-X", "KUBE-KUBELET-CANARY"},
}

// removeKubeletRules deletes the kubelet's rules for IPv4 and IPv6; a rule
// or chain that is not there is no error (IPv6 has no KUBE-FIREWALL). A
// jump is deleted as often as it is there: kube-proxy adds the same one.
func removeKubeletRules() {
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, args := range kubeletRules {
			for range 8 {
				if exec.Command(tool, args...).Run() != nil || args[2] != "-D" {
					break
				}
			}
		}
	}
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func readSysctl(key string) (string, error) {
	data, err := os.ReadFile(filepath.Join("/proc/sys", key))
	if err != nil {
		return "", fmt.Errorf("reading sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(data)), nil
}

func writeSysctl(key, value string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting sysctl %s=%s: %w", key, value, err)
	}
	return nil
}
