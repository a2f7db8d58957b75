package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/test/controlplane"
)

// chartDir is the broker's chart, relative to the repository root.
const chartDir = "deploy/helm/tether"

// helmLabels are the labels the chart adds to what deploy/broker labels an
// object with.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// helm runs the cached helm (building it first) in the repository root, with
// its caches and configuration in a folder of the test's, and returns its
// standard output; it fails the test when helm fails.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runHelm is helm that returns helm's failure instead of failing the test.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a first build of helm included
	defer cancel()
	return controlplane.Helm{Dir: repoRoot(t), Home: t.TempDir(), Progress: os.Stderr}.Run(ctx, args...)
}

// TestChartLints: helm lint --strict finds nothing in the chart, with its
// default values and with values a user sets.
func TestChartLints(t *testing.T) {
	helm(t, "lint", "--strict", chartDir)
	helm(t, "lint", "--strict", chartDir, "--namespace", "ops", "--set", "image.tag=v0.1.0,replicas=3", "--set", "extraArgs={--log-level=debug}")
}

// TestChartIsDeployBroker: the chart with its default values, installed in
// tether-system, renders exactly the objects of deploy/broker but the
// Namespace (helm install --create-namespace makes it), field for field,
// with Helm's labels added.
func TestChartIsDeployBroker(t *testing.T) {
	cp := controlplane.Get(t)
	want := map[string]*unstructured.Unstructured{}
	for _, o := range decodeAll(t, []byte(kubectl(t, cp, "kustomize", "deploy/broker").stdout)) {
		if o.GetKind() != "Namespace" {
			want[objectKey(o)] = o
		}
	}
	got := map[string]*unstructured.Unstructured{}
	for _, o := range decodeAll(t, []byte(helm(t, "template", "tether", chartDir, "--namespace", ns))) {
		labels := o.GetLabels()
		for _, l := range helmLabels {
			if labels[l] == "" {
				t.Errorf("%s lacks Helm's label %s", objectKey(o), l)
			}
			delete(labels, l)
		}
		o.SetLabels(labels)
		got[objectKey(o)] = o
	}
	keys := func(m map[string]*unstructured.Unstructured) []string { return slices.Sorted(maps.Keys(m)) }
	if !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("the chart renders\n  %s\ndeploy/broker has\n  %s", strings.Join(keys(got), "\n  "), strings.Join(keys(want), "\n  "))
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k].Object, w.Object) {
			t.Errorf("%s differs from deploy/broker's:\n%s", k, firstDifference(t, got[k].Object, w.Object))
		}
	}
}

// TestChartFollowsItsNamespace: installed in another namespace, the chart
// names that namespace wherever deploy/broker names tether-system, and the
// values reach the Deployment.
func TestChartFollowsItsNamespace(t *testing.T) {
	out := helm(t, "template", "tether", chartDir, "--namespace", "ops",
		"--set", "image.repository=registry.example.com/tether,image.tag=v0.1.0,replicas=3,logFormat=text",
		"--set", "extraArgs={--log-level=debug}")
	if strings.Contains(out, ns) {
		t.Errorf("installed in ops, the chart still names %s:\n%s", ns, out)
	}
	for _, o := range decodeAll(t, []byte(out)) {
		if o.GetKind() != "Deployment" {
			continue
		}
		replicas, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		if fmt.Sprint(replicas) != "3" || c["image"] != "registry.example.com/tether:v0.1.0" ||
			!slices.Contains(args, "--log-format=text") || args[len(args)-1] != "--log-level=debug" {
			t.Errorf("the Deployment has replicas %v, image %v, args %v", replicas, c["image"], args)
		}
	}
	for _, o := range decodeAll(t, []byte(out)) {
		for _, s := range subjectsOf(o) {
			if s["namespace"] != "ops" {
				t.Errorf("%s binds %v", objectKey(o), s)
			}
		}
	}
}

// TestChartSchedulesAsTold: the scheduling values reach the broker's Pods,
// a class of one's own replaces the chart's PriorityClass, and the
// NetworkPolicy can be left out.
func TestChartSchedulesAsTold(t *testing.T) {
	out := helm(t, "template", "tether", chartDir, "--namespace", "ops",
		"--set", "priorityClass.create=false,priorityClass.name=platform-critical,networkPolicy.enabled=false",
		"--set", "nodeSelector.pool=infra,tolerations[0].key=dedicated,tolerations[0].operator=Exists,affinity=null,topologySpreadConstraints=null")
	kinds := map[string]bool{}
	for _, o := range decodeAll(t, []byte(out)) {
		kinds[o.GetKind()] = true
		if o.GetKind() != "Deployment" {
			continue
		}
		pod, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		tolerations, _ := pod["tolerations"].([]any)
		if pod["priorityClassName"] != "platform-critical" || fmt.Sprint(pod["nodeSelector"]) != "map[pool:infra]" ||
			len(tolerations) != 1 || pod["affinity"] != nil || pod["topologySpreadConstraints"] != nil {
			t.Errorf("the broker's Pod spec: priorityClassName %v, nodeSelector %v, tolerations %v, affinity %v, topologySpreadConstraints %v",
				pod["priorityClassName"], pod["nodeSelector"], pod["tolerations"], pod["affinity"], pod["topologySpreadConstraints"])
		}
	}
	for _, kind := range []string{"PriorityClass", "NetworkPolicy"} {
		if kinds[kind] {
			t.Errorf("the chart renders a %s it was told not to", kind)
		}
	}
}

// TestChartRefusesAnUnknownLogFormat: a value the broker would refuse at
// start fails the install instead.
func TestChartRefusesAnUnknownLogFormat(t *testing.T) {
	_, err := runHelm(t, "template", "tether", chartDir, "--set", "logFormat=yaml")
	if err == nil || !strings.Contains(err.Error(), "logFormat") {
		t.Fatalf("logFormat=yaml: %v, want an error that names logFormat", err)
	}
}

// subjectsOf returns a binding's subjects.
func subjectsOf(o *unstructured.Unstructured) []map[string]any {
	subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
	var out []map[string]any
	for _, s := range subjects {
		out = append(out, s.(map[string]any))
	}
	return out
}

// firstDifference shows got and want as indented JSON from the first line
// where they differ.
func firstDifference(t *testing.T, got, want any) string {
	t.Helper()
	g, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	gl, wl := strings.Split(string(g), "\n"), strings.Split(string(w), "\n")
	i := 0
	for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
		i++
	}
	tail := func(l []string) string { return strings.Join(l[i:min(len(l), i+8)], "\n") }
	return fmt.Sprintf("at line %d, the chart's:\n%s\ndeploy/broker's:\n%s", i+1, tail(gl), tail(wl))
}

// TestChartGrantsHandlerResources: the value handlerResources renders one
// ClusterRole with the aggregation label, get, list, watch and patch on
// each item's resources unless it lists verbs; without it there is none
// (TestChartIsDeployBroker).
func TestChartGrantsHandlerResources(t *testing.T) {
	out := helm(t, "template", "tether", chartDir, "--namespace", ns,
		"--set", "handlerResources[0].apiGroup=seed.tether.dev,handlerResources[0].resources={gadgets}",
		"--set", "handlerResources[1].apiGroup=,handlerResources[1].resources={configmaps},handlerResources[1].verbs={list,watch}")
	var found bool
	for _, o := range decodeAll(t, []byte(out)) {
		if o.GetKind() != "ClusterRole" || o.GetName() != "tether-broker-handlers" {
			continue
		}
		found = true
		if o.GetLabels()[auth.AggregationLabel] != "true" {
			t.Errorf("tether-broker-handlers lacks the label %s: %v", auth.AggregationLabel, o.GetLabels())
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		want := []any{
			map[string]any{"apiGroups": []any{"seed.tether.dev"}, "resources": []any{"gadgets"}, "verbs": []any{"get", "list", "watch", "patch"}},
			map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"list", "watch"}},
		}
		if !reflect.DeepEqual(rules, want) {
			t.Errorf("tether-broker-handlers rules\n  %v\nwant\n  %v", rules, want)
		}
	}
	if !found {
		t.Errorf("no ClusterRole tether-broker-handlers in\n%s", out)
	}
	_, err := runHelm(t, "template", "tether", chartDir, "--set", "handlerResources[0].apiGroup=x,handlerResources[0].resources={y},handlerResources[0].verbs={delete}")
	if err == nil || !strings.Contains(err.Error(), "handlerResources") {
		t.Errorf("a verb other than get, list, watch, patch: %v, want an error that names handlerResources", err)
	}
}

// TestChartGrantsHandlerServiceAccounts: the value handlerServiceAccounts
// renders, per item, a Role in its namespace with impersonate on that
// ServiceAccount alone, bound to the broker.
func TestChartGrantsHandlerServiceAccounts(t *testing.T) {
	out := helm(t, "template", "tether", chartDir, "--namespace", "ops",
		"--set", "handlerServiceAccounts[0].namespace=gadgets,handlerServiceAccounts[0].name=gadgets-handler")
	var role, binding bool
	for _, o := range decodeAll(t, []byte(out)) {
		if o.GetName() != "tether-broker-as-gadgets-handler" {
			continue
		}
		if o.GetNamespace() != "gadgets" {
			t.Errorf("%s is in namespace %q, want gadgets", objectKey(o), o.GetNamespace())
		}
		switch o.GetKind() {
		case "Role":
			role = true
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			want := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"serviceaccounts"},
				"resourceNames": []any{"gadgets-handler"}, "verbs": []any{"impersonate"}}}
			if !reflect.DeepEqual(rules, want) {
				t.Errorf("the Role's rules\n  %v\nwant\n  %v", rules, want)
			}
		case "RoleBinding":
			binding = true
			if s := subjectsOf(o); len(s) != 1 || s[0]["name"] != "tether-broker" || s[0]["namespace"] != "ops" {
				t.Errorf("the RoleBinding binds %v, want the broker's ServiceAccount in ops", s)
			}
		}
	}
	if !role || !binding {
		t.Errorf("Role %v, RoleBinding %v tether-broker-as-gadgets-handler in\n%s", role, binding, out)
	}
	if _, err := runHelm(t, "template", "tether", chartDir, "--set", "handlerServiceAccounts[0].name=x"); err == nil {
		t.Error("an item without a namespace: no error")
	}
}
