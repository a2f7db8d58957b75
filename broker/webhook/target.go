package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Target is where a handler's webhooks send the API server.
type Target int

const (
	// TargetKept keeps what the handler's webhooks point at: what this
	// Manager last wrote for it, else what its configurations in the
	// cluster point at (a new leader restoring a handler before any of its
	// instances is back), else the leader.
	TargetKept Target = iota
	// TargetLeader points them at Options.URL or Options.Service.
	TargetLeader
	// TargetEveryReplica points them at Options.ReplicasURL or
	// Options.ReplicasService, when given (else at the leader): the
	// handler's instances keep a session to every replica, so any ready
	// replica can answer.
	TargetEveryReplica
)

// endpoint is one admission endpoint the webhooks can point at: a base URL
// or a Service; neither when empty.
type endpoint struct {
	url     string
	service *Service
}

// newEndpoint checks the URL or Service of Options' field prefix+"URL" or
// prefix+"Service".
func newEndpoint(prefix, rawURL string, svc *Service) (endpoint, error) {
	var e endpoint
	if rawURL != "" && svc != nil {
		return e, fmt.Errorf("webhook: Options.%sURL and Options.%sService are exclusive", prefix, prefix)
	}
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil {
			return e, fmt.Errorf("webhook: Options.%sURL: %w", prefix, err)
		}
		if u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return e, fmt.Errorf("webhook: Options.%sURL %q: the API server needs an https URL with a host and no user, query or fragment", prefix, rawURL)
		}
		e.url = strings.TrimSuffix(rawURL, "/")
	}
	if svc != nil {
		if svc.Namespace == "" || svc.Name == "" {
			return e, fmt.Errorf("webhook: Options.%sService needs a namespace and a name", prefix)
		}
		if svc.Port < 0 || svc.Port > 65535 {
			return e, fmt.Errorf("webhook: Options.%sService port %d is out of range", prefix, svc.Port)
		}
		e.service = &Service{Namespace: svc.Namespace, Name: svc.Name, Port: svc.Port}
		if e.service.Port == 0 {
			e.service.Port = 443
		}
	}
	return e, nil
}

func (e endpoint) empty() bool { return e.url == "" && e.service == nil }

// serves reports whether cc sends the API server to e.
func (e endpoint) serves(cc admissionregistrationv1.WebhookClientConfig) bool {
	switch {
	case e.service != nil && cc.Service != nil:
		return cc.Service.Namespace == e.service.Namespace && cc.Service.Name == e.service.Name
	case e.url != "" && cc.URL != nil:
		return strings.HasPrefix(*cc.URL, e.url+"/")
	}
	return false
}

// endpointLocked is the endpoint for the handler's webhooks, resolving
// TargetKept; the caller holds h.mu.
func (m *Manager) endpointLocked(ctx context.Context, handler string, h *handlerState) (endpoint, error) {
	if m.replicas.empty() {
		return m.leader, nil
	}
	if h.target == TargetKept {
		every, err := m.pointsAtReplicas(ctx, handler)
		if err != nil {
			return endpoint{}, err
		}
		h.target = TargetLeader
		if every {
			h.target = TargetEveryReplica
		}
	}
	if h.target == TargetEveryReplica {
		return m.replicas, nil
	}
	return m.leader, nil
}

// pointsAtReplicas reports whether the handler's configurations in the
// cluster point at the replicas' endpoint.
func (m *Manager) pointsAtReplicas(ctx context.Context, handler string) (bool, error) {
	v, err := m.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, ConfigName(handler), metav1.GetOptions{})
	switch {
	case err == nil:
		if len(v.Webhooks) > 0 {
			return m.replicas.serves(v.Webhooks[0].ClientConfig), nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading where the webhooks of handler %q point: %w", handler, err)
	}
	mu, err := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, ConfigName(handler), metav1.GetOptions{})
	switch {
	case err == nil:
		if len(mu.Webhooks) > 0 {
			return m.replicas.serves(mu.Webhooks[0].ClientConfig), nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading where the webhooks of handler %q point: %w", handler, err)
	}
	return false, nil
}

var errNoEndpoint = errors.New("no admission endpoint (Options.URL or Options.Service) to send the API server to")

// EveryReplica names, sorted, the handlers whose configurations in the
// cluster point at the replicas' endpoint: a replica that starts waits
// for an instance of each before it reports ready (broker/reviewers.go),
// since the API server may send it their reviews as soon as it is. None
// without a replicas' endpoint.
func (m *Manager) EveryReplica(ctx context.Context) ([]string, error) {
	if m.replicas.empty() {
		return nil, nil
	}
	selector := metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy}
	v, err := m.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, selector)
	if err != nil {
		return nil, fmt.Errorf("listing the validating webhook configurations: %w", err)
	}
	mu, err := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, selector)
	if err != nil {
		return nil, fmt.Errorf("listing the mutating webhook configurations: %w", err)
	}
	var names []string
	for _, c := range v.Items {
		if len(c.Webhooks) > 0 && m.replicas.serves(c.Webhooks[0].ClientConfig) {
			names = append(names, c.Labels[labelHandler])
		}
	}
	for _, c := range mu.Items {
		if len(c.Webhooks) > 0 && m.replicas.serves(c.Webhooks[0].ClientConfig) {
			names = append(names, c.Labels[labelHandler])
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
