package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/memlimit"
	"github.com/tether-dev/tether/test/controlplane"
)

const (
	ns          = "tether-system"
	brokerName  = "tether-broker"
	handlerName = "example-handler"
	// exampleNS is the example handler's own namespace.
	exampleNS = "tether-example"
	image     = "tether:dev"
)

// brokerArgs are the broker's arguments in deploy/broker/deployment.yaml.
var brokerArgs = []string{
	"--listen=:7443",
	"--metrics-listen=:9090",
	"--namespace=$(POD_NAMESPACE)",
	"--deployment=tether-broker",
	"--leader-elect",
	"--log-format=json",
	"--admission-listen=:8444",
	"--admission-service=tether-broker",
	"--admission-replicas-service=tether-broker-admission",
	"--admission-service-port=8443",
	"--token-audience=tether.dev/broker",
	"--leader-elect-liveness-address=[$(POD_IP)]:7444",
}

// relayArgs are the arguments of the broker Pod's relay container.
var relayArgs = []string{
	"relay",
	"--listen=:8443",
	"--local=127.0.0.1:8444",
	"--peers=tether-broker-replicas",
	"--peer-port=8444",
	"--namespace=$(POD_NAMESPACE)",
	"--tls-secret=tether-admission-tls",
	"--log-format=json",
}

// handlerArgs are the example handler's arguments.
var handlerArgs = []string{
	"--broker=tether-broker-replicas.tether-system.svc:7443",
	"--tls-ca-file=/etc/tether/ca/ca.crt",
	"--log-format=json",
}

// wantObjects is every object deploy/ makes, as kind/namespace/name.
var wantObjects = []string{
	"ClusterRole//tether-broker",
	"ClusterRole//tether-broker-base",
	"ClusterRole//tether-broker-example-handler",
	"ClusterRole//tether-example-handler",
	"ClusterRole//tether-example-handler-objects",
	"ClusterRole//tether-metrics-reader",
	"ClusterRoleBinding//tether-broker",
	"ClusterRoleBinding//tether-broker-base",
	"ClusterRoleBinding//tether-example-handler",
	"ConfigMap/tether-example/tether-broker-ca",
	"Deployment/tether-example/example-handler",
	"Deployment/tether-system/tether-broker",
	"Namespace//tether-example",
	"Namespace//tether-system",
	"NetworkPolicy/tether-example/example-handler",
	"NetworkPolicy/tether-system/tether-broker",
	"PodDisruptionBudget/tether-system/tether-broker",
	"PriorityClass//tether-broker",
	"Role/tether-example/tether-broker-ca",
	"Role/tether-example/tether-broker-example-handler",
	"Role/tether-system/tether-broker",
	"Role/tether-system/tether-handler-example",
	"RoleBinding/tether-example/tether-broker-ca",
	"RoleBinding/tether-example/tether-broker-example-handler",
	"RoleBinding/tether-system/tether-broker",
	"RoleBinding/tether-system/tether-handler-example",
	"Service/tether-system/tether-broker",
	"Service/tether-system/tether-broker-admission",
	"Service/tether-system/tether-broker-replicas",
	"ServiceAccount/tether-example/example-handler",
	"ServiceAccount/tether-system/tether-broker",
	"ValidatingAdmissionPolicy//tether-broker-grant",
	"ValidatingAdmissionPolicy//tether-broker-writes",
	"ValidatingAdmissionPolicyBinding//tether-broker-grant",
	"ValidatingAdmissionPolicyBinding//tether-broker-writes",
}

// decodeAll parses a multi-document YAML stream.
func decodeAll(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("parsing the kustomize output: %v", err)
		}
		if m == nil {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

func objectKey(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

func TestKustomizeBuild(t *testing.T) {
	cp := controlplane.Get(t)
	out := kubectl(t, cp, "kustomize", "deploy/")
	objs := decodeAll(t, []byte(out.stdout))
	var got []string
	for _, o := range objs {
		if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
			t.Errorf("object without apiVersion, kind or name: %v", o.Object)
		}
		got = append(got, objectKey(o))
		if o.GetLabels()["app.kubernetes.io/part-of"] != "tether" {
			t.Errorf("%s lacks the label app.kubernetes.io/part-of=tether", objectKey(o))
		}
		if o.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				if img := c.(map[string]any)["image"]; img != image {
					t.Errorf("%s runs image %v, want %s", objectKey(o), img, image)
				}
			}
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, wantObjects) {
		t.Errorf("kubectl kustomize deploy/ made\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantObjects, "\n  "))
	}

	// The broker alone builds too, without the example handler.
	out = kubectl(t, cp, "kustomize", "deploy/broker")
	for _, o := range decodeAll(t, []byte(out.stdout)) {
		if strings.Contains(objectKey(o), "example-handler") {
			t.Errorf("deploy/broker contains %s", objectKey(o))
		}
	}
}

func TestManifestsApply(t *testing.T) {
	cp, res := applyManifests(t)
	if strings.Contains(res.stderr, "PodSecurity") {
		t.Errorf("the apply warned about Pod Security:\n%s", res.stderr)
	}
	kube := cp.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, n := range []string{ns, exampleNS} {
		nsObj, err := kube.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := nsObj.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
			t.Errorf("namespace %s enforces Pod Security %q, want restricted", n, got)
		}
	}
	for n, sa := range map[string]string{ns: brokerName, exampleNS: handlerName} {
		if _, err := kube.CoreV1().ServiceAccounts(n).Get(ctx, sa, metav1.GetOptions{}); err != nil {
			t.Errorf("ServiceAccount %s/%s: %v", n, sa, err)
		}
	}

	t.Run("ClusterRole", func(t *testing.T) {
		cr, err := kube.RbacV1().ClusterRoles().Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantAggregation := &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
			{MatchLabels: map[string]string{auth.AggregationLabel: "true"}},
		}}
		if !reflect.DeepEqual(cr.AggregationRule, wantAggregation) || len(cr.Rules) != 0 {
			t.Errorf("ClusterRole %s: aggregation %v, rules %v; want %v and no rules of its own (no controller manager here fills them)",
				brokerName, cr.AggregationRule, cr.Rules, wantAggregation)
		}
		base, err := kube.RbacV1().ClusterRoles().Get(ctx, brokerName+"-base", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"},
				Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterrolebindings"}, Verbs: []string{"get", "list", "create"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{ns}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{brokerName}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, ResourceNames: []string{brokerName}, Verbs: []string{"get", "patch"}},
		}
		if !reflect.DeepEqual(base.Rules, want) {
			t.Errorf("ClusterRole %s rules\n  %v\nwant\n  %v", base.Name, base.Rules, want)
		}
		exampleForBroker, err := kube.RbacV1().ClusterRoles().Get(ctx, exampleBrokerRole, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantExample := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get", "list", "watch", "patch"}},
		}
		if !reflect.DeepEqual(exampleForBroker.Rules, wantExample) || exampleForBroker.Labels[auth.AggregationLabel] != "true" {
			t.Errorf("ClusterRole %s: labels %v, rules\n  %v\nwant the aggregation label and\n  %v",
				exampleBrokerRole, exampleForBroker.Labels, exampleForBroker.Rules, wantExample)
		}
		// The broker may act as the example handler's ServiceAccount, by
		// name, because the handler's install grants it so.
		asHandler, err := kube.RbacV1().Roles(exampleNS).Get(ctx, exampleBrokerRole, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantAs := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{handlerName}, Verbs: []string{"impersonate"}},
		}
		if !reflect.DeepEqual(asHandler.Rules, wantAs) {
			t.Errorf("Role %s/%s rules\n  %v\nwant\n  %v", exampleNS, exampleBrokerRole, asHandler.Rules, wantAs)
		}
		// It may fill the CA bundle in the handler's namespace: that
		// ConfigMap, by name, shipped empty so that no create is needed.
		caRole, err := kube.RbacV1().Roles(exampleNS).Get(ctx, "tether-broker-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantCA := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"tether-broker-ca"}, Verbs: []string{"get", "update"}},
		}
		if !reflect.DeepEqual(caRole.Rules, wantCA) {
			t.Errorf("Role %s/tether-broker-ca rules\n  %v\nwant\n  %v", exampleNS, caRole.Rules, wantCA)
		}
		exampleNSObj, err := kube.CoreV1().Namespaces().Get(ctx, exampleNS, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := exampleNSObj.Labels[broker.CANamespaceLabel]; got != ns {
			t.Errorf("namespace %s: label %s=%q, want %q: it asks the broker for its CA bundle", exampleNS, broker.CANamespaceLabel, got, ns)
		}
		role, err := kube.RbacV1().Roles(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantRole := []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"}, Verbs: []string{"get", "list", "patch"}},
		}
		if !reflect.DeepEqual(role.Rules, wantRole) {
			t.Errorf("Role %s/%s rules\n  %v\nwant\n  %v", ns, brokerName, role.Rules, wantRole)
		}
		handlerRole, err := kube.RbacV1().ClusterRoles().Get(ctx, "tether-example-handler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantHandler := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"create"}},
		}
		if !reflect.DeepEqual(handlerRole.Rules, wantHandler) {
			t.Errorf("ClusterRole tether-example-handler rules\n  %v\nwant\n  %v", handlerRole.Rules, wantHandler)
		}
		// Secrets and ConfigMaps only where a namespace binds them
		// (TestExampleHandlerRBAC): the ClusterRole is bound nowhere here.
		objectsRole, err := kube.RbacV1().ClusterRoles().Get(ctx, exampleObjectsRole, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantObjects := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		}
		if !reflect.DeepEqual(objectsRole.Rules, wantObjects) {
			t.Errorf("ClusterRole %s rules\n  %v\nwant\n  %v", exampleObjectsRole, objectsRole.Rules, wantObjects)
		}
		sa := rbacv1.Subject{Kind: "ServiceAccount", Name: brokerName, Namespace: ns}
		crb, err := kube.RbacV1().ClusterRoleBindings().Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != brokerName || !slices.Equal(crb.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("ClusterRoleBinding %s = %+v %+v", brokerName, crb.RoleRef, crb.Subjects)
		}
		crb, err = kube.RbacV1().ClusterRoleBindings().Get(ctx, brokerName+"-base", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != brokerName+"-base" || !slices.Equal(crb.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("ClusterRoleBinding %s-base = %+v %+v", brokerName, crb.RoleRef, crb.Subjects)
		}
		rb, err := kube.RbacV1().RoleBindings(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != brokerName || !slices.Equal(rb.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("RoleBinding %s = %+v %+v", brokerName, rb.RoleRef, rb.Subjects)
		}
	})

	t.Run("BrokerDeployment", func(t *testing.T) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
		}
		pod := d.Spec.Template.Spec
		if pod.ServiceAccountName != brokerName {
			t.Errorf("serviceAccountName = %q", pod.ServiceAccountName)
		}
		if len(pod.Containers) != 2 {
			t.Fatalf("%d containers, want 2: the broker and its relay", len(pod.Containers))
		}
		c, relay := container(t, pod, "broker"), container(t, pod, "relay")
		if c.Image != image || len(c.Command) != 0 {
			t.Errorf("image %q command %q, want %s with its entrypoint", c.Image, c.Command, image)
		}
		if !slices.Equal(c.Args, brokerArgs) {
			t.Errorf("args = %q, want %q", c.Args, brokerArgs)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		for name, field := range map[string]string{"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name", "POD_IP": "status.podIP"} {
			if e := env[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
				t.Errorf("env %s = %+v, want the downward API field %s", name, e, field)
			}
		}
		if e := env["TETHER_DEPLOYMENT"]; e.Value != brokerName {
			t.Errorf("TETHER_DEPLOYMENT = %q, want %s", e.Value, brokerName)
		}
		ports := containerPorts(c)
		for name, port := range map[string]int32{"grpc": 7443, "admission": 8444, "metrics": 9090, "leader-liveness": 7444} {
			if ports[name] != port {
				t.Errorf("container port %s = %d, want %d", name, ports[name], port)
			}
		}
		checkProbe(t, "readiness", c.ReadinessProbe, "/readyz", ports, 9090)
		checkProbe(t, "liveness", c.LivenessProbe, "/healthz", ports, 9090)
		checkResources(t, c)
		checkSecurity(t, pod, c)
		checkMemoryLimit(t, c)
		pc, err := kube.SchedulingV1().PriorityClasses().Get(ctx, pod.PriorityClassName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("priorityClassName %q: %v", pod.PriorityClassName, err)
		} else if pc.Value <= 0 || pc.Value > highestUserPriority || pc.GlobalDefault {
			t.Errorf("PriorityClass %s: value %d, globalDefault %v; want above 0, at most a user's highest, not the default", pc.Name, pc.Value, pc.GlobalDefault)
		}
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/tmp" {
			t.Errorf("the broker mounts %v, want /tmp only: it keeps its certificates in Secrets it reads itself", c.VolumeMounts)
		}
		// The relay: the same image, the webhook port, ready while it
		// listens, and nothing mounted (it reads its certificate through the API server, not from a file).
		if relay.Image != image || len(relay.Command) != 0 || !slices.Equal(relay.Args, relayArgs) {
			t.Errorf("relay: image %q command %q args %q, want %s with its entrypoint and %q", relay.Image, relay.Command, relay.Args, image, relayArgs)
		}
		rports := containerPorts(relay)
		if len(rports) != 1 || rports["webhook"] != 8443 {
			t.Errorf("relay ports %v, want webhook 8443 alone", rports)
		}
		if p := relay.ReadinessProbe; p == nil || p.TCPSocket == nil || resolvePort(p.TCPSocket.Port, rports) != 8443 {
			t.Errorf("relay readiness probe %+v, want a TCP connection to 8443", p)
		}
		if e := slices.IndexFunc(relay.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_IP" }); e < 0 ||
			relay.Env[e].ValueFrom == nil || relay.Env[e].ValueFrom.FieldRef == nil || relay.Env[e].ValueFrom.FieldRef.FieldPath != "status.podIP" {
			t.Errorf("the relay's env has no POD_IP from status.podIP: %+v", relay.Env)
		}
		checkResources(t, relay)
		checkSecurity(t, pod, relay)
		if len(relay.VolumeMounts) != 0 {
			t.Errorf("the relay mounts %v, want nothing", relay.VolumeMounts)
		}
		if d.Spec.Template.Annotations["kubectl.kubernetes.io/default-container"] != "broker" {
			t.Errorf("the Pod's annotations %v do not make the broker kubectl's default container", d.Spec.Template.Annotations)
		}
	})

	t.Run("Service", func(t *testing.T) {
		svc, err := kube.CoreV1().Services(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The leader labels its own Pod; the Service selects that Pod only.
		leaderPod := maps.Clone(d.Spec.Template.Labels)
		leaderPod[broker.LeaderLabel] = "true"
		if !selects(svc.Spec.Selector, leaderPod) || selects(svc.Spec.Selector, d.Spec.Template.Labels) {
			t.Errorf("Service selector %v: want the broker's Pods %v with %s=true only", svc.Spec.Selector, d.Spec.Template.Labels, broker.LeaderLabel)
		}
		cports := podPorts(d.Spec.Template.Spec)
		want := map[string]int32{"grpc": 7443, "webhook": 8443, "metrics": 9090}
		if len(svc.Spec.Ports) != len(want) {
			t.Errorf("Service has %d ports, want %d", len(svc.Spec.Ports), len(want))
		}
		for _, p := range svc.Spec.Ports {
			if want[p.Name] != p.Port {
				t.Errorf("Service port %s = %d, want %d", p.Name, p.Port, want[p.Name])
			}
			if target := resolvePort(p.TargetPort, cports); target != want[p.Name] {
				t.Errorf("Service port %s targets %s (container port %d), want %d", p.Name, p.TargetPort.String(), target, want[p.Name])
			}
		}
	})

	// The broker's NetworkPolicy admits its Pods' five ports and no
	// other: each port it names is one the container serves. Who may
	// reach which: TestManifestsRunAdmissionHA.
	t.Run("NetworkPolicy", func(t *testing.T) {
		np, err := kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !selects(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("NetworkPolicy selector %v does not select the broker's Pods %v", np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels)
		}
		cports := podPorts(d.Spec.Template.Spec)
		var got []int32
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				got = append(got, resolvePort(*p.Port, cports))
			}
		}
		slices.Sort(got)
		if want := []int32{7443, 7444, 8443, 8444, 9090}; !slices.Equal(got, want) {
			t.Errorf("the NetworkPolicy admits ports %v, want the broker's %v", got, want)
		}
	})

	t.Run("PodDisruptionBudget", func(t *testing.T) {
		pdb, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(1) {
			t.Errorf("minAvailable = %v, want 1", pdb.Spec.MinAvailable)
		}
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) || len(pdb.Spec.Selector.MatchExpressions) != 0 {
			t.Errorf("PDB selector %v does not select the broker's Pods %v", pdb.Spec.Selector, d.Spec.Template.Labels)
		}
	})

	t.Run("ExampleHandlerDeployment", func(t *testing.T) {
		d, err := kube.AppsV1().Deployments(exampleNS).Get(ctx, handlerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := d.Spec.Template.Spec
		if pod.ServiceAccountName != handlerName {
			t.Errorf("serviceAccountName = %q", pod.ServiceAccountName)
		}
		c := pod.Containers[0]
		if c.Image != image || !slices.Equal(c.Command, []string{"/example-handler"}) || !slices.Equal(c.Args, handlerArgs) {
			t.Errorf("image %q command %q args %q, want %s /example-handler %q", c.Image, c.Command, c.Args, image, handlerArgs)
		}
		checkResources(t, c)
		checkSecurity(t, pod, c)
		checkMemoryLimit(t, c)
		checkMount(t, pod, c, "/etc/tether/ca", "tether-broker-ca")
		// Only the CA bundle the broker publishes, never a Secret.
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				t.Errorf("the handler mounts the Secret %s", v.Secret.SecretName)
			}
			if v.ConfigMap != nil && (len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != "ca.crt") {
				t.Errorf("the handler mounts %v of %s, want only ca.crt", v.ConfigMap.Items, v.ConfigMap.Name)
			}
		}
		handlerSelector := d.Spec.Selector.MatchLabels
		broker, err := kube.AppsV1().Deployments(ns).Get(ctx, brokerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if selects(handlerSelector, broker.Spec.Template.Labels) || selects(broker.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Error("the broker's and the handler's selectors overlap")
		}
	})

	// Pods from both templates pass admission in their namespaces (Pod
	// Security "restricted", the ServiceAccount admission), with a
	// server-side dry run: nothing is stored and nothing would run anyway.
	t.Run("PodsPassAdmission", func(t *testing.T) {
		for n, name := range map[string]string{ns: brokerName, exampleNS: handlerName} {
			d, err := kube.AppsV1().Deployments(n).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-dry-run-", Namespace: n, Labels: d.Spec.Template.Labels},
				Spec:       d.Spec.Template.Spec,
			}
			if _, err := kube.CoreV1().Pods(n).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("a Pod of %s is refused: %v", name, err)
			}
		}
	})

	// Applying again changes nothing, and kubectl diff sees no difference:
	// the manifests do not fight the API server's defaults.
	t.Run("Idempotent", func(t *testing.T) {
		kubectl(t, cp, "apply", "-k", "deploy/", "--server-side", "--field-manager=tether-deploy-test")
		if _, err := exec.LookPath("diff"); err != nil {
			t.Skip("no diff program for kubectl diff")
		}
		res := runKubectl(cp, repoRoot(t), "diff", "-k", "deploy/", "--server-side", "--field-manager=tether-deploy-test")
		if res.err != nil {
			t.Errorf("kubectl diff after apply reports differences or fails:\n%s", res)
		}
	})
}

func containerPorts(c corev1.Container) map[string]int32 {
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	return ports
}

// podPorts are the named ports of every container of pod: the broker's
// and its relay's.
func podPorts(pod corev1.PodSpec) map[string]int32 {
	ports := map[string]int32{}
	for _, c := range pod.Containers {
		maps.Copy(ports, containerPorts(c))
	}
	return ports
}

// container is pod's container named name.
func container(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no container %s in %+v", name, pod.Containers)
	}
	return pod.Containers[i]
}

// resolvePort turns a named or numbered target port into a number.
func resolvePort(p intstr.IntOrString, named map[string]int32) int32 {
	if p.Type == intstr.String {
		return named[p.StrVal]
	}
	return p.IntVal
}

// selects reports whether a non-empty selector matches labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path string, ports map[string]int32, port int32) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe = %+v, want HTTP GET %s", what, p, path)
		return
	}
	if p.HTTPGet.Path != path || resolvePort(p.HTTPGet.Port, ports) != port {
		t.Errorf("%s probe = GET %s on %s, want GET %s on %d", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
}

func checkResources(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("container %s: %s request %s, limit %s; want both, request <= limit", c.Name, r, req.String(), lim.String())
		}
	}
}

func checkSecurity(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatalf("container %s: no pod or container securityContext", c.Name)
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext runAsNonRoot %v runAsUser %v, want true and non-zero", psc.RunAsNonRoot, psc.RunAsUser)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile = %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("container %s: runAsNonRoot not true", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container %s: readOnlyRootFilesystem not true", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container %s: allowPrivilegeEscalation not false", c.Name)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container %s: capabilities %+v, want drop ALL and add none", c.Name, sc.Capabilities)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container %s: seccompProfile = %+v, want RuntimeDefault", c.Name, sc.SeccompProfile)
	}
}

// checkMount checks that c mounts the ConfigMap configMap read-only at path.
// highestUserPriority is the highest value a PriorityClass of a user may
// have; above it are the system classes (the API server's own limit).
const highestUserPriority = 1_000_000_000

// checkMemoryLimit: the container is told its memory limit, from which
// the binary sets the Go runtime's soft limit with headroom, and is not
// given GOMEMLIMIT equal to the limit itself.
func checkMemoryLimit(t *testing.T, c corev1.Container) {
	t.Helper()
	var found bool
	for _, e := range c.Env {
		switch e.Name {
		case "GOMEMLIMIT":
			t.Errorf("%s sets GOMEMLIMIT, which overrides the headroom %s leaves", c.Name, memlimit.EnvLimit)
		case memlimit.EnvLimit:
			found = e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
		}
	}
	if !found {
		t.Errorf("%s: no %s from the downward API's limits.memory", c.Name, memlimit.EnvLimit)
	}
}

func checkMount(t *testing.T, pod corev1.PodSpec, c corev1.Container, path, configMap string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("container %s mounts %s writable", c.Name, path)
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name {
				if v.ConfigMap == nil || v.ConfigMap.Name != configMap {
					t.Errorf("container %s mounts %+v at %s, want the ConfigMap %s", c.Name, v.VolumeSource, path, configMap)
				}
				return
			}
		}
		t.Errorf("container %s mounts the missing volume %s", c.Name, m.Name)
		return
	}
	t.Errorf("container %s mounts nothing at %s", c.Name, path)
}
