package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestChartShipsTheMonitoringWhenAsked: with monitoring.* on, the chart
// renders a ServiceMonitor on the Service's metrics port, a PrometheusRule
// whose groups are files/alerts.yaml's, and a dashboard ConfigMap holding
// files/dashboard.json, each with the labels asked for. With the defaults
// it renders none (TestChartIsDeployBroker: exactly deploy/broker).
func TestChartShipsTheMonitoringWhenAsked(t *testing.T) {
	out := helm(t, "template", "tether", chartDir, "--namespace", "ops",
		"--set", "monitoring.serviceMonitor.enabled=true,monitoring.serviceMonitor.labels.release=prom",
		"--set", "monitoring.prometheusRule.enabled=true,monitoring.prometheusRule.labels.release=prom",
		"--set", "monitoring.dashboard.enabled=true")
	byKind := map[string]*unstructured.Unstructured{}
	for _, o := range decodeAll(t, []byte(out)) {
		byKind[o.GetKind()+"/"+o.GetName()] = o
	}
	sm, rule, board, svc := byKind["ServiceMonitor/tether-broker"], byKind["PrometheusRule/tether-broker"],
		byKind["ConfigMap/tether-broker-dashboard"], byKind["Service/tether-broker"]
	if sm == nil || rule == nil || board == nil || svc == nil {
		t.Fatalf("rendered %v; want a ServiceMonitor, a PrometheusRule and a dashboard ConfigMap beside the Service", keysOf(byKind))
	}
	for _, o := range []*unstructured.Unstructured{sm, rule} {
		if o.GetLabels()["release"] != "prom" || o.GetNamespace() != "ops" {
			t.Errorf("%s: labels %v, namespace %q", objectKey(o), o.GetLabels(), o.GetNamespace())
		}
	}
	if board.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap lacks Grafana's sidecar label: %v", board.GetLabels())
	}

	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the Service lacks (%v)", k, v, svc.GetLabels())
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(endpoints) != 1 || !hasPort(ports, endpoints[0].(map[string]any)["port"]) {
		t.Errorf("the ServiceMonitor scrapes %v; the Service's ports are %v", endpoints, ports)
	}

	var alerts map[string]any
	if err := yaml.Unmarshal(readRepoFile(t, "deploy/helm/tether/files/alerts.yaml"), &alerts); err != nil {
		t.Fatal(err)
	}
	if groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups"); !reflect.DeepEqual(groups, alerts["groups"]) {
		t.Errorf("the PrometheusRule's groups differ from files/alerts.yaml's:\n%s", firstDifference(t, map[string]any{"groups": groups}, alerts))
	}
	var want, got any
	if err := json.Unmarshal(readRepoFile(t, "deploy/helm/tether/files/dashboard.json"), &want); err != nil {
		t.Fatalf("files/dashboard.json: %v", err)
	}
	data, _, _ := unstructured.NestedString(board.Object, "data", "tether-broker.json")
	if err := json.Unmarshal([]byte(data), &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the ConfigMap's dashboard (%v) is not files/dashboard.json", err)
	}
}

func hasPort(ports []any, name any) bool {
	for _, p := range ports {
		if p.(map[string]any)["name"] == name {
			return true
		}
	}
	return false
}

func keysOf(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
