package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// AdmissionFunc answers one admission review. Return nil to allow the
// request, Deny or DenyWithCode (possibly wrapped) to refuse it. Any other
// error, including RetryAfter and Permanent, is a failure of the webhook:
// the binding's failure policy decides (see Failure), and with the default,
// FailOpen, the request is admitted. A review is never retried: the API
// server is waiting.
//
// A mutate function (OnMutate) changes r.Object in place; a validate
// function's changes are ignored. ctx ends at the review's deadline, a
// little before the webhook's timeout, or when the broker withdraws the
// review (context.Cause is then ErrCancelled).
type AdmissionFunc func(ctx context.Context, r *Review) error

// Review is one admission request, as an AdmissionFunc sees it. Warn is
// safe for concurrent use.
type Review struct {
	// Binding is the id of the binding that matched.
	Binding string
	// UID identifies the review (not the object); the API server matches
	// the answer to it.
	UID       string
	Operation Operation
	// SubResource is set when the request is for a subresource ("status",
	// "scale").
	SubResource string
	// DryRun: the request will not be persisted. A function with side
	// effects (NoSideEffectsOnDryRun) must skip them.
	DryRun bool
	// UserName and UserGroups are who made the request.
	UserName   string
	UserGroups []string
	Resource   Resource
	// Namespace is empty for cluster-scoped objects; Name may be empty on
	// CREATE (when the object has metadata.generateName).
	Namespace, Name string
	// Object is the request's object: the SDK's own copy, which a mutate
	// function changes in place. Nil for DELETE (see OldObject) and for
	// CONNECT without one.
	Object *unstructured.Unstructured
	// OldObject is the object before the request, for UPDATE and DELETE;
	// nil otherwise.
	OldObject *unstructured.Unstructured
	// Raw is the admission.k8s.io/v1 AdmissionRequest as JSON, for what the
	// fields above leave out (e.g. options, requestKind); its object and
	// oldObject are left out, as Object and OldObject have them.
	Raw json.RawMessage

	log hclog.Logger

	mu       sync.Mutex
	warnings []string
}

// Warn adds a warning to the answer, allowed or denied; the API server
// passes it to the client (kubectl prints it). Each is cut to 1024 bytes.
// Warnings are dropped when the function fails.
func (r *Review) Warn(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, truncate(msg))
}

// Logger returns a logger that names the handler, binding, review and
// object.
func (r *Review) Logger() hclog.Logger {
	if r.log == nil {
		return hclog.NewNullLogger()
	}
	return r.log
}

// DeniedError refuses an admission request. Create one with Deny or
// DenyWithCode; find one with errors.As.
type DeniedError struct {
	// Code is the HTTP status code the client gets, 400 to 599; any other
	// value, zero included, means 403 Forbidden.
	Code int
	// Message tells the client why; the API server shows it.
	Message string
}

func (e *DeniedError) Error() string {
	if e.Message == "" {
		return "denied"
	}
	return e.Message
}

// code is Code when it is a client or server error status, else zero (the
// broker's 403).
func (e *DeniedError) code() int32 {
	if e.Code < 400 || e.Code > 599 {
		return 0
	}
	return int32(e.Code)
}

// Deny refuses the request with 403 Forbidden and message. When the error
// is wrapped, the client sees the whole chain's message.
func Deny(message string) error {
	return &DeniedError{Message: message}
}

// DenyWithCode refuses the request with the HTTP status code (400 to 599,
// e.g. 422 for an invalid object; other values mean 403) and message.
func DenyWithCode(code int, message string) error {
	return &DeniedError{Code: code, Message: message}
}

// OnValidate answers the API server's admission reviews of r with fn. The
// broker serves the webhook (a ValidatingWebhookConfiguration it keeps in
// sync with the handler's bindings) and forwards each review to an
// instance; the handler serves no HTTPS. fn returns nil to allow, Deny or
// DenyWithCode to refuse; changes it makes to Review.Object are ignored.
// Any other error, a panic, or no answer before the deadline is a failure,
// and the binding's failure policy decides.
//
// When the handler has been absent past its grace, the broker removes the
// webhook, so a missing handler never blocks the cluster. With
// Finalizer(FinalizerStrict) it keeps the webhook instead, failing closed:
// requests are refused while no instance is connected.
//
// Options: Operations (default CREATE and UPDATE), Subresource,
// NamespaceSelector, MatchCondition, Failure, NoSideEffectsOnDryRun, and
// Timeout, which for an admission binding is the webhook's timeout: whole
// seconds from 1s to 30s, default 10s. Labels becomes the webhook's object
// selector and Namespaces a namespace selector; the annotation filters and
// When are evaluated by the broker, which admits a request they do not
// match without asking fn. Fields, Retries, Backoff and Optional do not
// apply. Reviews count against the window like other deliveries.
func (h *Handler) OnValidate(r Resource, fn AdmissionFunc, opts ...BindingOption) {
	h.register(Validate, r, "", nil, opts, func(b *binding) { b.review = fn })
}

// OnMutate is OnValidate for a mutating webhook: fn may change Review.Object
// in place, and when it returns nil the SDK answers with the JSON patch
// (RFC 6902) from the request's object to the changed one. Objects are
// patched member by member; a changed array is replaced whole. A denied or
// failed review sends no patch. The API server runs mutating webhooks before
// validating ones.
func (h *Handler) OnMutate(r Resource, fn AdmissionFunc, opts ...BindingOption) {
	h.register(Mutate, r, "", nil, opts, func(b *binding) { b.review = fn })
}

// review runs a validate or mutate binding's function for one review and
// builds its ack: OK with the answer, or FAIL when the function failed, for
// the broker to apply the binding's failure policy.
func (h *Handler) review(c *call) *tetherv1.Ack {
	ctx, span := h.traced(c)
	ack := h.answerReview(ctx, c)
	endTraced(span, ack)
	return ack
}

// answerReview runs the function under ctx and makes the review's ack.
func (h *Handler) answerReview(ctx context.Context, c *call) *tetherv1.Ack {
	id := c.d.GetId()
	r, err := newReview(c.d, c.log)
	if err != nil {
		c.log.Error("malformed delivery", "error", err)
		return failAck(id, "malformed delivery: "+err.Error())
	}
	start := time.Now()
	err = callSafely(ctx, c.b.review, r, c.log)
	resp, err := r.answer(c.kind, c.d.GetObject(), err)
	if err != nil {
		c.log.Error("review failed; the binding's failure policy decides", "duration", time.Since(start), "error", err)
		return failAck(id, err.Error())
	}
	c.log.Debug("review answered", "duration", time.Since(start), "allowed", resp.GetAllowed(),
		"patch_bytes", len(resp.GetPatch()), "warnings", len(resp.GetWarnings()))
	return &tetherv1.Ack{DeliveryId: id, Outcome: tetherv1.Outcome_OUTCOME_OK, Admission: resp}
}

func newReview(d *tetherv1.Delivery, log hclog.Logger) (*Review, error) {
	a := d.GetAdmission()
	if a == nil {
		return nil, errors.New("admission delivery without a review")
	}
	r := &Review{
		Binding:     d.GetBindingId(),
		UID:         a.GetUid(),
		Operation:   operationName(a.GetOperation()),
		SubResource: a.GetSubResource(),
		DryRun:      a.GetDryRun(),
		UserName:    a.GetUserName(),
		UserGroups:  a.GetUserGroups(),
		Raw:         a.GetRequest(),
		log:         log,
	}
	if ref := d.GetRef(); ref != nil {
		res := ref.GetResource()
		r.Resource = Resource{Group: res.GetGroup(), Version: res.GetVersion(), Resource: res.GetResource(), Kind: res.GetKind()}
		r.Namespace, r.Name = ref.GetNamespace(), ref.GetName()
	}
	var err error
	if r.Object, err = decodeObject(d.GetObject()); err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	if r.OldObject, err = decodeObject(d.GetOldObject()); err != nil {
		return nil, fmt.Errorf("old object: %w", err)
	}
	return r, nil
}

// answer turns what the function returned into the admission response; an
// error means the function failed. original is the request's object as
// delivered, the base of a mutate binding's patch.
func (r *Review) answer(kind EventKind, original []byte, err error) (*tetherv1.AdmissionResponse, error) {
	var denied *DeniedError
	switch {
	case err == nil:
	case errors.As(err, &denied):
		return &tetherv1.AdmissionResponse{Message: err.Error(), Code: denied.code(), Warnings: r.takeWarnings()}, nil
	default:
		return nil, err
	}
	resp := &tetherv1.AdmissionResponse{Allowed: true, Warnings: r.takeWarnings()}
	if kind == Mutate {
		if resp.Patch, err = r.patch(original); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

func (r *Review) takeWarnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warnings...)
}

// patch is the JSON patch from the original object to Review.Object, nil
// when the function changed nothing. The changed object goes through JSON
// once, so that whatever Go values the function stored compare as the JSON
// the API server will see.
func (r *Review) patch(original []byte) ([]byte, error) {
	from, err := decodeObject(original)
	if err != nil {
		return nil, fmt.Errorf("decoding the original object: %w", err)
	}
	var to *unstructured.Unstructured
	if r.Object != nil {
		raw, err := json.Marshal(r.Object.Object)
		if err != nil {
			return nil, fmt.Errorf("encoding the mutated object: %w", err)
		}
		if to, err = decodeObject(raw); err != nil {
			return nil, fmt.Errorf("decoding the mutated object: %w", err)
		}
	}
	switch {
	case from == nil && to == nil:
		return nil, nil
	case from == nil:
		return nil, errors.New("the review has no object to mutate")
	case to == nil:
		return nil, errors.New("the function removed Review.Object; a mutation cannot delete the object")
	}
	patch, err := jsonPatch(from.Object, to.Object)
	if err != nil {
		return nil, fmt.Errorf("computing the patch: %w", err)
	}
	return patch, nil
}
