package testenv

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ReviewCreateAt sends hook the review of creating obj (of resource gvr)
// as the API server would, but to the admission listener at addr rather
// than the host hook names, so that one replica of several is asked; the
// answer is verified with hook's CA bundle. nil when the create is allowed.
func ReviewCreateAt(hook admissionregistrationv1.ValidatingWebhook, addr string, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	u, err := url.Parse(*hook.ClientConfig.URL)
	if err != nil {
		return fmt.Errorf("the webhook's URL: %w", err)
	}
	u.Host, u.RawQuery = addr, "timeout=5s" // the API server adds the webhook's timeout
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		return err
	}
	gvk := obj.GroupVersionKind()
	review := admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: types.UID("review-" + obj.GetName()), Operation: admissionv1.Create, Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Resource: metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource},
		Kind:     metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		UserInfo: authenticationv1.UserInfo{Username: "tester", Groups: []string{"system:authenticated"}},
		Object:   runtime.RawExtension{Raw: raw},
	}}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(hook.ClientConfig.CABundle)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(u.String(), "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Response == nil {
		return fmt.Errorf("status %d, not an AdmissionReview: %v", resp.StatusCode, err)
	}
	if !answer.Response.Allowed {
		return fmt.Errorf("refused: %v", answer.Response.Result)
	}
	return nil
}
