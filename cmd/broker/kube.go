package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeConfig finds the cluster as kubectl does: the flag, $KUBECONFIG, the
// in-cluster service account, then ~/.kube/config.
func kubeConfig(path string, inCluster bool) (*rest.Config, string, error) {
	load := func(p string) (*rest.Config, string, error) {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: p}
		if p == "" {
			rules = clientcmd.NewDefaultClientConfigLoadingRules()
		}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, "", fmt.Errorf("loading kubeconfig %s: %w", p, err)
		}
		return cfg, "kubeconfig " + p, nil
	}
	switch {
	case path != "":
		return load(path)
	case os.Getenv("KUBECONFIG") != "":
		cfg, _, err := load("")
		return cfg, "$KUBECONFIG", err
	case inCluster:
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("loading in-cluster config: %w", err)
		}
		return cfg, "in-cluster service account", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, "", fmt.Errorf("no kubeconfig given and no home directory: %w", err)
	}
	p := filepath.Join(home, ".kube", "config")
	if _, err := os.Stat(p); err != nil {
		return nil, "", fmt.Errorf("no cluster found: pass --kubeconfig, set $KUBECONFIG, run in a cluster, or create %s (try 'make cluster')", p)
	}
	return load(p)
}
