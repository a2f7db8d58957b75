package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/tracing"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// review asks the handler and answers the API server.
func (s *Server) review(w http.ResponseWriter, r *http.Request, handler, bindingID string, review *admissionv1.AdmissionReview, timeout time.Duration) {
	start := time.Now()
	req := review.Request
	traceRequest(r.Context(), req)
	deadline := reviewDeadline(timeout)
	ctx, cancel := context.WithTimeout(r.Context(), deadline)
	resp, b, err := s.opts.Reviewer.Review(ctx, handler, bindingID, req)
	timedOut := err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded))
	cancel()
	switch {
	case b == nil:
		// The API server applies the webhook's own failure policy.
		msg := fmt.Sprintf("handler %q has no binding %q on this broker (unknown, or this replica does not lead)", handler, bindingID)
		if err != nil {
			msg += ": " + err.Error()
		}
		s.refuse(w, r, http.StatusServiceUnavailable, msg)
		return
	case !b.Kind.IsAdmission():
		s.refuse(w, r, http.StatusNotFound, fmt.Sprintf("binding %q of handler %q is a %s binding, not validate or mutate", bindingID, handler, b.Kind))
		return
	}
	actx, answer := traceAnswer(r.Context())
	defer answer.End()
	out, result, err := s.verdict(b, req, resp, err)
	if err != nil {
		out = s.applyFailurePolicy(actx, b, handler, req, err, timedOut, deadline)
	}
	answer.SetAttributes(attrResult.String(result))
	took := time.Since(start)
	s.opts.Metrics.Admission().Reviewed(handler, bindingID, result, took)
	tracing.Logger(r.Context(), s.log).Debug("admission review answered", "handler", handler, "binding", bindingID, "operation", req.Operation,
		"namespace", req.Namespace, "name", req.Name, "result", result, "took", took)
	data, merr := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: out})
	if merr != nil {
		tracing.Logger(r.Context(), s.log).Error("cannot encode an admission answer", "handler", handler, "binding", bindingID, "error", merr)
		http.Error(w, "encoding the admission answer: "+merr.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// verdict turns the handler's answer into the API server's, checking any
// patch. When the handler failed (err is the Reviewer's error, or the
// answer is not valid) it returns metrics.AdmissionError and why.
func (s *Server) verdict(b *binding.Binding, req *admissionv1.AdmissionRequest, resp *tetherv1.AdmissionResponse, err error) (*admissionv1.AdmissionResponse, string, error) {
	if err == nil && resp == nil {
		err = fmt.Errorf("%w: the handler answered without an admission response", ErrInvalidResponse)
	}
	var patch []byte
	if err == nil && resp.GetAllowed() {
		switch b.Kind {
		case binding.Validate:
			if !noPatch(resp.GetPatch()) {
				err = fmt.Errorf("%w: a validate binding answered with a patch; only mutate bindings may patch", ErrInvalidResponse)
			}
		case binding.Mutate:
			if patch, err = checkPatch(req, resp.GetPatch(), s.opts.MaxBodyBytes); err != nil {
				err = fmt.Errorf("%w: invalid patch: %w", ErrInvalidResponse, err)
			}
		}
	}
	if err != nil {
		return nil, metrics.AdmissionError, err
	}
	out := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: resp.GetAllowed(), Warnings: resp.GetWarnings()}
	if !out.Allowed {
		code := resp.GetCode()
		if code < 400 || code > 599 {
			code = http.StatusForbidden
		}
		out.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: resp.GetMessage()}
		return out, metrics.AdmissionDenied, nil
	}
	if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		out.Patch, out.PatchType = patch, &pt
	}
	return out, metrics.AdmissionAllowed, nil
}

// applyFailurePolicy answers for a handler that failed, as its binding's
// failure policy says: Fail refuses the request, Ignore admits it with a
// warning. Either way the failure is logged and counted.
func (s *Server) applyFailurePolicy(ctx context.Context, b *binding.Binding, handler string, req *admissionv1.AdmissionRequest, err error, timedOut bool, deadline time.Duration) *admissionv1.AdmissionResponse {
	policy := b.Admission.FailurePolicy
	if policy != binding.FailFail {
		policy = binding.FailIgnore
	}
	reason, why := metrics.AdmissionHandlerError, err.Error()
	switch {
	case errors.Is(err, ErrNoInstance) && timedOut:
		reason, why = metrics.AdmissionNoInstance, fmt.Sprintf("no instance of the handler connected within %v", deadline)
	case errors.Is(err, ErrNoInstance):
		reason = metrics.AdmissionNoInstance
	case timedOut:
		reason, why = metrics.AdmissionTimeout, fmt.Sprintf("the handler did not answer within %v", deadline)
	case errors.Is(err, ErrInvalidResponse):
		reason = metrics.AdmissionInvalidResponse
	}
	tracing.Logger(ctx, s.log).Warn("admission webhook failed; applying its failure policy", "handler", handler, "binding", b.ID,
		"policy", policy, "operation", req.Operation, "namespace", req.Namespace, "name", req.Name,
		"reason", reason, "error", why)
	s.opts.Metrics.Admission().Failed(handler, b.ID, policy, reason)
	traceFailed(ctx, string(policy), reason, why)
	what := fmt.Sprintf("tether: the admission webhook of handler %q (binding %q) failed: %s", handler, b.ID, why)
	if policy == binding.FailIgnore {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true,
			Warnings: []string{what + "; the request was admitted (failure policy Ignore)"}}
	}
	code := int32(http.StatusInternalServerError)
	if timedOut {
		code = http.StatusGatewayTimeout
	}
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false,
		Result: &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: what}}
}

// noPatch reports whether raw asks for no change: empty, or "[]".
func noPatch(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return true
	}
	var ops []json.RawMessage
	return json.Unmarshal(raw, &ops) == nil && len(ops) == 0
}
