package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/webhook"
)

// Admission configures the HTTPS endpoint the API server calls for the
// handlers' validate and mutate bindings, and where the webhook
// configurations the broker writes point. The zero value serves no
// admission: validate and mutate bindings are refused.
type Admission struct {
	// Listen is the HTTPS address, e.g. ":8443". Ignored when Listener is set.
	Listen   string
	Listener net.Listener
	// URL is the base URL at which the API server reaches the endpoint, for a
	// broker outside the cluster; the default is https://<listen address>.
	URL string
	// Service names the Service in the broker's namespace in front of the
	// endpoint, for a broker inside the cluster; ServicePort is its port
	// (default 8443). When set, URL is not used.
	Service     string
	ServicePort int
	// ReplicasURL and ReplicasService are URL and Service for an endpoint
	// in front of every ready replica (a Service that selects every broker
	// Pod, on ServicePort): the webhooks of a handler whose instances keep
	// a session to every replica (CAPABILITY_EVERY_REPLICA) point there,
	// so that a review needs no leader; the others' point at URL or
	// Service. Empty: every handler's point at URL or Service.
	ReplicasURL     string
	ReplicasService string
	// ReadyWait is how long, with ReplicasURL or ReplicasService, a replica
	// that starts reports not ready while a handler whose webhooks point at
	// every replica has no instance connected to it, so that the API server
	// sends it none of that handler's reviews before one is there. Zero
	// means DefaultAdmissionReadyWait; negative, no wait.
	ReadyWait time.Duration
	// SecretName is the Secret in the broker's namespace that keeps the
	// serving certificate the broker generates (default
	// "tether-admission-tls"), so that replicas and restarts agree; its CA is
	// in SecretName + certs.CASecretSuffix. The key that signs the webhooks'
	// paths is in SecretName + "-path-key".
	SecretName string
	// CertFile and KeyFile are a serving certificate to use instead, and
	// CAFile the bundle that verifies it (without it, the API server uses
	// its system roots).
	CertFile, KeyFile, CAFile string
	// ExcludeNamespaces are the namespaces whose objects no webhook
	// intercepts, so that a webhook failing closed while the broker is
	// down cannot refuse the control plane's and the nodes' writes there;
	// nil means DefaultExcludedNamespaces, and an empty list excludes none
	// of them. The broker's own namespace is always excluded besides: its
	// Leases, Secrets and Pods are what it needs to come back.
	ExcludeNamespaces []string
	// ExcludeUsers and ExcludeGroups are the identities whose requests no
	// webhook intercepts, in any namespace and on cluster-scoped objects,
	// which a namespace cannot exclude: the nodes and the control plane's
	// controllers (a webhook failing closed while the broker is down would
	// otherwise refuse a Node's status, or the namespace controller's and the
	// garbage collector's deletions). nil means DefaultExcludedUsers and
	// DefaultExcludedGroups, and an empty list excludes none of them. The
	// broker's own user is always excluded besides: no webhook can refuse its
	// holds.
	ExcludeUsers, ExcludeGroups []string
}

// DefaultAdmissionSecret is Admission.SecretName unless set.
const DefaultAdmissionSecret = "tether-admission-tls"

// DefaultExcludedNamespaces is Admission.ExcludeNamespaces unless set: the
// namespaces of the control plane's components and of the nodes'
// heartbeat Leases.
var DefaultExcludedNamespaces = []string{"kube-system", "kube-node-lease"}

// DefaultExcludedUsers is Admission.ExcludeUsers unless set: the control
// plane's components that act as themselves.
var DefaultExcludedUsers = []string{"system:kube-controller-manager", "system:kube-scheduler"}

// DefaultExcludedGroups is Admission.ExcludeGroups unless set: the nodes'
// kubelets, and the ServiceAccounts of kube-system, as which
// kube-controller-manager's controllers act (the namespace controller, the
// garbage collector) and the cluster's own add-ons run.
var DefaultExcludedGroups = []string{"system:nodes", "system:serviceaccounts:kube-system"}

// excludedIdentities are the users (own besides the given ones or the
// defaults) and the groups no webhook intercepts.
func (a Admission) excludedIdentities(own []string) (users, groups []string) {
	users, groups = a.ExcludeUsers, a.ExcludeGroups
	if users == nil {
		users = DefaultExcludedUsers
	}
	if groups == nil {
		groups = DefaultExcludedGroups
	}
	return slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(own), users...)))), slices.Clone(groups)
}

// excludedNamespaces are the namespaces the webhooks leave out: the given
// ones (or the default) and the broker's own, sorted, each once.
func (a Admission) excludedNamespaces(own string) []string {
	given := a.ExcludeNamespaces
	if given == nil {
		given = DefaultExcludedNamespaces
	}
	return slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(given), own))))
}

func (a Admission) secretName() string {
	if a.SecretName == "" {
		return DefaultAdmissionSecret
	}
	return a.SecretName
}

// Enabled reports whether the broker serves admission.
func (a Admission) Enabled() bool { return a.Listen != "" || a.Listener != nil }

// Check reports settings that cannot work together.
func (a Admission) Check() error {
	given := 0
	for _, f := range []string{a.CertFile, a.KeyFile, a.CAFile} {
		if f != "" {
			given++
		}
	}
	if (a.CertFile == "") != (a.KeyFile == "") || (a.CAFile != "" && a.CertFile == "") {
		return errors.New("admission: a given certificate needs its key (and, optionally, the CA bundle that verifies it)")
	}
	if !a.Enabled() {
		if a.URL != "" || a.Service != "" || given > 0 {
			return errors.New("admission: settings given but no listen address")
		}
		return nil
	}
	if a.URL != "" && a.Service != "" {
		return errors.New("admission: give the URL (broker outside the cluster) or the Service (inside), not both")
	}
	if a.ReplicasURL != "" && a.Service != "" || a.ReplicasService != "" && a.Service == "" {
		return errors.New("admission: the replicas' URL goes with a URL (broker outside the cluster), their Service with a Service (inside)")
	}
	for _, u := range []string{a.URL, a.ReplicasURL} {
		if err := checkAdmissionURL(u); err != nil {
			return err
		}
	}
	if a.ServicePort < 0 || a.ServicePort > 65535 {
		return fmt.Errorf("admission service port %d is out of range", a.ServicePort)
	}
	for _, ns := range a.ExcludeNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("admission: excluded namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	return nil
}

// checkAdmissionURL checks a URL the API server is sent to; "" is none.
func checkAdmissionURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("admission URL: %w", err)
	}
	if u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("admission URL %q: want https://HOST[:PORT][/PATH]", raw)
	}
	return nil
}

// listenAdmission binds the admission endpoint's listener, if any.
func (b *Broker) listenAdmission() error {
	a := b.opts.Admission
	if !a.Enabled() || b.alis != nil {
		return nil
	}
	if a.Listener != nil {
		b.alis = a.Listener
		return nil
	}
	lis, err := net.Listen("tcp", a.Listen)
	if err != nil {
		return fmt.Errorf("listening for admission reviews on %s: %w", a.Listen, err)
	}
	b.alis = lis
	return nil
}

// AdmissionAddr is the address of the admission endpoint, once Listen has
// bound it; nil when the broker serves no admission.
func (b *Broker) AdmissionAddr() net.Addr {
	if b.alis == nil {
		return nil
	}
	return b.alis.Addr()
}

// admissionParts are what serves admission: the certificates, the HTTPS
// endpoint (on every replica) and the webhook configurations (written by
// the leader).
type admissionParts struct {
	certs  *certs.Serving
	paths  *admission.PathKey
	hooks  *webhook.Manager
	server *admission.Server // set once the dispatcher exists
	// excluded are the namespaces no webhook intercepts.
	excluded []string
}

// newAdmission builds the certificates and the configuration writer. The
// webhooks point at the Service when one is named, else at the URL.
func newAdmission(ctx context.Context, kube kube.Interface, opts Options, lis net.Listener, log hclog.Logger) (*admissionParts, error) {
	a, ns := opts.Admission, opts.Namespace
	copts := certs.Options{
		Name: "admission", Client: kube, Namespace: ns, SecretName: a.secretName(),
		CertFile: a.CertFile, KeyFile: a.KeyFile, CAFile: a.CAFile, Log: log.Named("admission"), CAOverlap: opts.CAOverlap,
	}
	excluded := a.excludedNamespaces(ns)
	users, groups := a.excludedIdentities(ownUser(ctx, kube, log))
	log.Info("no admission webhook intercepts these namespaces and identities", "namespaces", excluded, "users", users, "groups", groups)
	wopts := webhook.Options{Client: kube, Log: log.Named("webhook"), ExcludeUsers: users, ExcludeGroups: groups, ExcludeNamespaces: excluded}
	if a.Service != "" {
		port := a.ServicePort
		if port == 0 {
			port = 8443
		}
		wopts.Service = &webhook.Service{Namespace: ns, Name: a.Service, Port: int32(port)}
		copts.DNSNames = serviceNames(a.Service, ns)
		if a.ReplicasService != "" {
			wopts.ReplicasService = &webhook.Service{Namespace: ns, Name: a.ReplicasService, Port: int32(port)}
			copts.DNSNames = append(copts.DNSNames, serviceNames(a.ReplicasService, ns)...)
		}
	} else {
		u, err := a.url(lis)
		if err != nil {
			return nil, err
		}
		wopts.URL, wopts.ReplicasURL = u.String(), a.ReplicasURL
		hosts := []string{u.Hostname()}
		if a.ReplicasURL != "" {
			r, err := url.Parse(a.ReplicasURL)
			if err != nil {
				return nil, fmt.Errorf("admission replicas URL: %w", err)
			}
			hosts = append(hosts, r.Hostname())
		}
		for _, h := range slices.Compact(slices.Sorted(slices.Values(hosts))) {
			if ip := net.ParseIP(h); ip != nil {
				copts.IPAddresses = append(copts.IPAddresses, ip)
			} else {
				copts.DNSNames = append(copts.DNSNames, h)
			}
		}
	}
	serving, err := certs.New(copts)
	if err != nil {
		return nil, err
	}
	paths, err := admission.LoadPathKey(ctx, kube, ns, a.secretName()+"-path-key")
	if err != nil {
		return nil, err
	}
	wopts.CABundle, wopts.Paths = serving.CABundle, paths
	hooks, err := webhook.New(wopts)
	if err != nil {
		return nil, err
	}
	return &admissionParts{certs: serving, paths: paths, hooks: hooks, excluded: excluded}, nil
}

// serviceNames are the DNS names of a Service in namespace ns.
func serviceNames(name, ns string) []string {
	svc := name + "." + ns
	return []string{name, svc, svc + ".svc", svc + ".svc.cluster.local"}
}

// url is where the API server reaches the endpoint from outside
// the cluster: the given URL, or the listen address (loopback when it
// listens on every address).
func (a Admission) url(lis net.Listener) (*url.URL, error) {
	if a.URL != "" {
		return url.Parse(a.URL)
	}
	tcp, ok := lis.Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("admission: cannot make a URL of the listen address %s; give one", lis.Addr())
	}
	host := tcp.IP.String()
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return &url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(tcp.Port))}, nil
}

// ownUser is the broker's user name, so that the webhooks let its own
// writes (holds, progress) through: a handler's webhook must never block the
// broker that releases its holds.
func ownUser(ctx context.Context, kube kube.Interface, log hclog.Logger) []string {
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		log.Warn("cannot learn the broker's own user name; the webhooks will also review the broker's writes", "error", err)
		return nil
	}
	return []string{r.Status.UserInfo.Username}
}

// forwardCAChanges has the webhook configurations rewritten whenever the CA
// bundle changes.
func (a *admissionParts) forwardCAChanges(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.certs.Changed():
			a.hooks.CAChanged()
		}
	}
}
