package deploy

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestManifestsRunAdmissionHA: what deploy/ renders, and the chart with its
// default values beside deploy/example-handler, run the broker's admission
// high availability, read from the rendered objects alone (nothing is
// applied): every replica learns its Pod's address from the downward API
// and listens for the followers on a declared port; the NetworkPolicy lets
// the broker's Pods, and only them, reach that port, and anyone the
// admission port on every replica; the replicas' admission Service and the
// headless gRPC Service the broker's flags name exist and select every
// broker Pod, not only the leader's; the example handler dials the headless
// one by a name the broker's generated certificate covers, and its own
// NetworkPolicy lets it reach every replica; and there are replicas enough
// for one to be left through a drain.
func TestManifestsRunAdmissionHA(t *testing.T) {
	cp := controlplane.Get(t)
	chart := decodeAll(t, []byte(helm(t, "template", "tether", chartDir, "--namespace", ns)))
	chart = append(chart, decodeAll(t, []byte(kubectl(t, cp, "kustomize", "deploy/example-handler").stdout))...)
	for name, objs := range map[string][]*unstructured.Unstructured{
		"deploy":                    decodeAll(t, []byte(kubectl(t, cp, "kustomize", "deploy/").stdout)),
		"chart and example-handler": chart,
	} {
		t.Run(name, func(t *testing.T) { checkAdmissionHA(t, rendered(objs)) })
	}
}

// rendered are rendered objects by kind/namespace/name.
type rendered []*unstructured.Unstructured

// get converts the object key names into out, failing the test if it is
// not there.
func (r rendered) get(t *testing.T, key string, out any) {
	t.Helper()
	i := slices.IndexFunc(r, func(o *unstructured.Unstructured) bool { return objectKey(o) == key })
	if i < 0 {
		t.Fatalf("no %s rendered", key)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r[i].Object, out); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

// flagValue is the value of --name= in args; false when it is not there.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func checkAdmissionHA(t *testing.T, r rendered) {
	var d appsv1.Deployment
	r.get(t, "Deployment/"+ns+"/"+brokerName, &d)
	c := container(t, d.Spec.Template.Spec, "broker")
	relay := container(t, d.Spec.Template.Spec, "relay")
	ports := podPorts(d.Spec.Template.Spec)

	// The liveness address: the Pod's own address, on a declared port.
	env := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_IP" })
	if env < 0 || c.Env[env].ValueFrom == nil || c.Env[env].ValueFrom.FieldRef == nil || c.Env[env].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("the broker's env has no POD_IP from the downward API's status.podIP: %+v", c.Env)
	}
	alive, _ := flagValue(c.Args, "leader-elect-liveness-address")
	host, port, err := net.SplitHostPort(alive)
	if err != nil || host != "$(POD_IP)" {
		t.Errorf("--leader-elect-liveness-address=%q: want $(POD_IP) and a port (%v)", alive, err)
	}
	if p, _ := strconv.Atoi(port); p == 0 || ports["leader-liveness"] != int32(p) {
		t.Errorf("the liveness port %q is not the container port leader-liveness (%d)", port, ports["leader-liveness"])
	}

	// Both Services the broker's flags name select every broker Pod.
	admission, _ := flagValue(c.Args, "admission-replicas-service")
	admissionPort, _ := flagValue(c.Args, "admission-service-port")
	listen, _ := flagValue(c.Args, "admission-listen")
	_, listenPort, _ := net.SplitHostPort(listen)
	var adm corev1.Service
	r.get(t, "Service/"+ns+"/"+admission, &adm)
	if adm.Spec.ClusterIP == corev1.ClusterIPNone || adm.Spec.PublishNotReadyAddresses || !selectsEvery(adm.Spec.Selector, d) {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v, selector %v; want a ClusterIP (the API server calls no headless Service) "+
			"selecting every ready broker Pod %v", admission, adm.Spec.ClusterIP, adm.Spec.PublishNotReadyAddresses, adm.Spec.Selector, d.Spec.Template.Labels)
	}
	// The Service targets the relay, which forwards to the broker's
	// listener here, and to the other replicas' (not their relays').
	relayListen, _ := flagValue(relay.Args, "listen")
	_, relayPort, _ := net.SplitHostPort(relayListen)
	checkServicePort(t, adm, admissionPort, relayPort, ports)
	local, _ := flagValue(relay.Args, "local")
	if host, port, _ := net.SplitHostPort(local); port != listenPort || host != "127.0.0.1" {
		t.Errorf("the relay forwards to --local=%s, want 127.0.0.1 and the broker's --admission-listen port %s", local, listenPort)
	}
	if p, _ := flagValue(relay.Args, "peer-port"); p != listenPort || p == relayPort {
		t.Errorf("the relay forwards to peers' port %s, want the brokers' --admission-listen port %s, not the relays' %s", p, listenPort, relayPort)
	}
	if p, _ := strconv.Atoi(listenPort); ports["admission"] != int32(p) {
		t.Errorf("the broker's --admission-listen port %s is not the container port admission (%d)", listenPort, ports["admission"])
	}

	replicas := broker.DefaultGRPCReplicasService
	if v, ok := flagValue(c.Args, "tls-replicas-service"); ok {
		replicas = v
	}
	var headless corev1.Service
	r.get(t, "Service/"+ns+"/"+replicas, &headless)
	// Not-ready Pods too: a replica that starts waits, not ready, for the
	// handlers on every replica to find it here (--admission-ready-wait).
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses || !selectsEvery(headless.Spec.Selector, d) {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v, selector %v; want headless, not-ready Pods too, every broker Pod %v",
			replicas, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses, headless.Spec.Selector, d.Spec.Template.Labels)
	}
	grpcListen, _ := flagValue(c.Args, "listen")
	_, grpcPort, _ := net.SplitHostPort(grpcListen)
	checkServicePort(t, headless, grpcPort, grpcPort, ports)
	if peers, _ := flagValue(relay.Args, "peers"); peers != replicas && peers != replicas+"."+ns+".svc" {
		t.Errorf("the relay finds its peers at %q, want the headless Service %s", peers, replicas)
	}
	// The relay serves the certificate the broker writes, from its Secret
	// in the broker's namespace, which the Pod's ServiceAccount may get.
	secret := broker.DefaultAdmissionSecret
	if v, ok := flagValue(c.Args, "admission-secret"); ok {
		secret = v
	}
	if v, _ := flagValue(relay.Args, "tls-secret"); v != secret {
		t.Errorf("the relay reads its certificate from --tls-secret=%q, want the broker's admission Secret %q", v, secret)
	}
	nsEnv := slices.IndexFunc(relay.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAMESPACE" })
	if v, _ := flagValue(relay.Args, "namespace"); v != "$(POD_NAMESPACE)" || nsEnv < 0 || relay.Env[nsEnv].ValueFrom == nil ||
		relay.Env[nsEnv].ValueFrom.FieldRef == nil || relay.Env[nsEnv].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("the relay's --namespace=%q and env %+v: want $(POD_NAMESPACE), from the downward API's metadata.namespace", v, relay.Env)
	}

	checkBrokerNetworkPolicy(t, r, d, ports)
	checkHandlerDialsEveryReplica(t, r, d, replicas+"."+ns+".svc:"+grpcPort)

	// One replica is left through a drain, and one answers reviews.
	var pdb policyv1.PodDisruptionBudget
	r.get(t, "PodDisruptionBudget/"+ns+"/"+brokerName, &pdb)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 || pdb.Spec.MinAvailable == nil ||
		pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
		t.Errorf("replicas %v, PodDisruptionBudget minAvailable %v: want 2 or more, and at least 1 but fewer than the replicas available",
			d.Spec.Replicas, pdb.Spec.MinAvailable)
	}
}

// selectsEvery says whether a Service selector takes every broker Pod, the
// followers' too: the template's labels, without the leader's label.
func selectsEvery(selector map[string]string, d appsv1.Deployment) bool {
	_, leaderOnly := selector[broker.LeaderLabel]
	return selects(selector, d.Spec.Template.Labels) && !leaderOnly
}

// checkServicePort checks that svc has port and that it targets the
// container port the broker listens on.
func checkServicePort(t *testing.T, svc corev1.Service, port, containerPort string, ports map[string]int32) {
	t.Helper()
	want, _ := strconv.Atoi(port)
	target, _ := strconv.Atoi(containerPort)
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == int32(want) })
	if i < 0 {
		t.Errorf("Service %s has no port %s: %+v", svc.Name, port, svc.Spec.Ports)
		return
	}
	if got := resolvePort(svc.Spec.Ports[i].TargetPort, ports); got != int32(target) {
		t.Errorf("Service %s port %s targets %d, want the broker's %d", svc.Name, port, got, target)
	}
}

// checkBrokerNetworkPolicy: gRPC, webhooks and metrics from anywhere; the
// liveness port and the brokers' own admission port from the broker's Pods
// in its namespace, and from nowhere else.
func checkBrokerNetworkPolicy(t *testing.T, r rendered, d appsv1.Deployment, ports map[string]int32) {
	t.Helper()
	var np networkingv1.NetworkPolicy
	r.get(t, "NetworkPolicy/"+ns+"/"+brokerName, &np)
	from := map[int32][]networkingv1.NetworkPolicyPeer{}
	open := map[int32]bool{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			port := resolvePort(*p.Port, ports)
			if len(rule.From) == 0 {
				open[port] = true
			}
			from[port] = append(from[port], rule.From...)
		}
	}
	for _, name := range []string{"grpc", "webhook", "metrics"} {
		if !open[ports[name]] {
			t.Errorf("the NetworkPolicy does not admit port %s (%d) from anywhere", name, ports[name])
		}
	}
	// The liveness port, and the brokers' own admission port behind the
	// relays, from the other broker Pods alone.
	for _, name := range []string{"leader-liveness", "admission"} {
		port := ports[name]
		if open[port] || len(from[port]) == 0 {
			t.Errorf("the NetworkPolicy admits the %s port %d from anywhere %v, or from nowhere %v: want the broker's Pods alone", name, port, open[port], from[port])
		}
		for _, peer := range from[port] {
			if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil ||
				len(peer.PodSelector.MatchExpressions) != 0 || !selectsEvery(peer.PodSelector.MatchLabels, d) {
				t.Errorf("the %s port is admitted from %+v: want the broker's Pods of its namespace, every one", name, peer)
			}
		}
	}
}

// checkHandlerDialsEveryReplica: the example handler dials target, the
// headless Service, verifying a name the broker's generated certificate
// covers, and may reach the broker's gRPC port on every replica.
func checkHandlerDialsEveryReplica(t *testing.T, r rendered, d appsv1.Deployment, target string) {
	t.Helper()
	var h appsv1.Deployment
	r.get(t, "Deployment/"+exampleNS+"/"+handlerName, &h)
	args := h.Spec.Template.Spec.Containers[0].Args
	if got, _ := flagValue(args, "broker"); got != target {
		t.Errorf("the example handler dials %q, want the headless Service %s", got, target)
	}
	host, port, _ := net.SplitHostPort(target)
	if name, ok := flagValue(args, "tls-server-name"); ok && name != host {
		t.Errorf("the example handler verifies the name %q, want %s: the name it dials, which the certificate covers", name, host)
	}
	var np networkingv1.NetworkPolicy
	r.get(t, "NetworkPolicy/"+exampleNS+"/"+handlerName, &np)
	want := intstr.Parse(port)
	for _, rule := range np.Spec.Egress {
		for _, peer := range rule.To {
			reachesBroker := peer.PodSelector != nil && selectsEvery(peer.PodSelector.MatchLabels, d)
			if reachesBroker && slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && *p.Port == want }) {
				return
			}
		}
	}
	t.Errorf("the example handler's NetworkPolicy lets it reach no broker Pod's port %s: %+v", port, np.Spec.Egress)
}
