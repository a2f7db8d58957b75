package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Review forwards an admission review to an instance of handler for its
// binding bindingID and waits, until ctx ends, for the answer. The owner of
// the object's UID answers, so that one object's reviews and lifecycle
// deliveries go to the same instance; a CREATE (no UID yet) goes to the
// least busy instance. While the handler has no instance, Review waits for
// one until ctx ends. On a replica that does not lead, the instances are
// those that signed in for reviews only (reviewsonly.go); a review waiting
// on them when the replica comes to lead moves to the handler's controller.
//
// The binding is returned whenever the handler and binding are known, also
// with an error, so that the caller can apply its failure policy; it is nil
// for a handler this replica has not seen.
func (m *Manager) Review(ctx context.Context, handler, bindingID string, req *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
	for {
		rv, b, superseded := m.admissionBinding(handler, bindingID)
		if b == nil {
			return nil, nil, fmt.Errorf("handler %q has no validate or mutate binding %q on this broker", handler, bindingID)
		}
		resp, err := rv.review(ctx, b, req, superseded)
		if errors.Is(err, errSuperseded) {
			continue
		}
		return resp, b, err
	}
}

// errSuperseded ends a review waiting on a handler's reviews-only
// instances once the handler has a controller: it is sent again there.
var errSuperseded = errors.New("the handler's reviews moved to its controller")

// Binding returns a handler's validate or mutate binding; nil when this
// broker does not know it.
func (m *Manager) Binding(handler, bindingID string) *binding.Binding {
	_, b, _ := m.admissionBinding(handler, bindingID)
	return b
}

// admissionBinding finds who answers a handler's reviews: its controller,
// or on a replica that does not lead (or has not yet restored the handler)
// its reviews-only instances, with the channel that closes when those are
// superseded (nil for a controller).
func (m *Manager) admissionBinding(handler, bindingID string) (*reviews, *binding.Binding, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rt := m.controllers[handler]; rt != nil {
		return rt.reviews, rt.admission[bindingID], nil
	}
	if ro := m.follower[handler]; ro != nil {
		return ro.reviews, ro.reviews.admission[bindingID], ro.superseded
	}
	return nil, nil, nil
}

// reviews forwards one handler's admission reviews to its instances.
type reviews struct {
	*handler
	deliver *deliverer
}

func (rv *reviews) review(ctx context.Context, b *binding.Binding, req *admissionv1.AdmissionRequest, superseded <-chan struct{}) (*tetherv1.AdmissionResponse, error) {
	if !b.Admission.Admits(string(req.Operation), req.SubResource) {
		// A configuration written for older bindings of the handler, not
		// yet rewritten: these bindings do not intercept this request.
		return &tetherv1.AdmissionResponse{Allowed: true}, nil
	}
	uid, matched, err := rv.subject(b, req)
	if err != nil {
		return nil, err
	}
	if !matched {
		return &tetherv1.AdmissionResponse{Allowed: true}, nil
	}
	// The objects travel once, in Delivery.object and old_object.
	slim := *req
	slim.Object, slim.OldObject = kruntime.RawExtension{}, kruntime.RawExtension{}
	raw, err := json.Marshal(&slim)
	if err != nil {
		return nil, fmt.Errorf("encoding the review: %w", err)
	}
	d := &tetherv1.Delivery{
		Id: nextDeliveryID(), BindingId: b.ID, Kind: tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION, Attempt: 1,
		Ref:       reviewRef(b, req),
		Object:    req.Object.Raw,
		OldObject: req.OldObject.Raw,
		Admission: &tetherv1.AdmissionRequest{
			Uid: string(req.UID), Operation: admissionOperation(req.Operation), SubResource: req.SubResource,
			DryRun: req.DryRun != nil && *req.DryRun, UserName: req.UserInfo.Username, UserGroups: req.UserInfo.Groups,
			Request: raw,
		},
	}
	if dl, ok := ctx.Deadline(); ok {
		d.Deadline = timestamppb.New(dl)
	}
	d.Ref.Uid = string(uid)
	start := time.Now()
	ack, err := rv.send(ctx, uid, d, superseded)
	if errors.Is(err, errSuperseded) {
		return nil, err // sent again, and measured, by the controller
	}
	rv.deliver.measure(ctx, b, d, time.Since(start), ack, err)
	if err != nil {
		return nil, err
	}
	if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK && pastDeadline(ctx) {
		// The handler's own context ended at the same deadline, a moment
		// before the broker's: it ran out of time, and says so.
		return nil, fmt.Errorf("%w: the handler gave up at the deadline: %s", context.DeadlineExceeded, ack.GetMessage())
	}
	if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || ack.GetAdmission() == nil {
		msg := ack.GetMessage()
		if msg == "" {
			msg = "no admission response in its ack"
		}
		return nil, fmt.Errorf("%w: the handler failed (%s): %s", admission.ErrInvalidResponse, outcomeName(ack.GetOutcome()), msg)
	}
	return ack.GetAdmission(), nil
}

// deadlineSlack is how close to its deadline a review's failure counts as
// the deadline's: the handler's clock and the broker's end it apart by a
// round trip.
const deadlineSlack = 50 * time.Millisecond

func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < deadlineSlack
}

// send sends d to the instance that should answer and waits for
// its ack. An instance that leaves before it answers does not count: the
// review goes to the next one, as long as ctx allows, or with errSuperseded
// to the handler's controller once superseded closes.
func (rv *reviews) send(ctx context.Context, uid types.UID, d *tetherv1.Delivery, superseded <-chan struct{}) (*tetherv1.Ack, error) {
	for {
		in, changed := rv.reviewer(uid)
		if in == nil {
			select {
			case <-changed:
				continue
			case <-superseded:
				return nil, errSuperseded
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %w", admission.ErrNoInstance, ctx.Err())
			}
		}
		dctx, span := rv.deliver.traceDelivery(ctx, in, d)
		ack, err := in.DeliverUnless(ctx, d, changed, nil)
		traceAck(dctx, span, ack, err)
		switch {
		case errors.Is(err, session.ErrMoved), errors.Is(err, session.ErrGone), errors.Is(err, session.ErrLeaving):
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			select {
			case <-superseded:
				return nil, errSuperseded
			default:
			}
			continue
		case err != nil:
			return nil, err
		}
		return ack, nil
	}
}

// reviewer picks the instance for a review: the owner of uid, or for a new
// object the instance with the fewest deliveries in flight.
func (rv *reviews) reviewer(uid types.UID) (*session.Instance, <-chan struct{}) {
	if uid != "" {
		return rv.pool.owner(uid)
	}
	return rv.pool.leastBusy()
}

// subject reads the UID of the object a review is about (the old one
// for a DELETE), which picks the instance, and applies the filters the API
// server cannot: annotations and CEL. Only when the binding has those is
// the whole object decoded; otherwise its metadata is enough.
func (rv *reviews) subject(b *binding.Binding, req *admissionv1.AdmissionRequest) (uid types.UID, matched bool, err error) {
	raw := req.Object.Raw
	if isNull(raw) {
		raw = req.OldObject.Raw // DELETE has only the old object
	}
	if len(b.Annotations) == 0 && b.When == nil {
		if isNull(raw) {
			return "", true, nil
		}
		var meta struct {
			Metadata struct {
				UID types.UID `json:"uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return "", false, fmt.Errorf("decoding the review's object: %w", err)
		}
		return meta.Metadata.UID, true, nil
	}
	subject, err := decodeReviewObject(raw)
	if err != nil {
		return "", false, fmt.Errorf("decoding the review's object: %w", err)
	}
	old, err := decodeReviewObject(req.OldObject.Raw)
	if err != nil {
		return "", false, fmt.Errorf("decoding the review's oldObject: %w", err)
	}
	if subject == nil {
		return "", true, nil
	}
	return subject.GetUID(), rv.matchFilters(b, subject, old), nil
}

// matchFilters applies the filters the API server cannot: annotations
// and CEL. Labels and namespaces are the webhook's own selectors, which the
// API server applied already (to the old and the new object).
func (rv *reviews) matchFilters(b *binding.Binding, obj *unstructured.Unstructured, old *unstructured.Unstructured) bool {
	if len(b.Annotations) == 0 && b.When == nil {
		return true
	}
	filters := binding.Binding{Annotations: b.Annotations, When: b.When}
	var oldMap map[string]any
	if old != nil {
		oldMap = old.Object
	}
	return rv.matches(&filters, obj, oldMap)
}

func isNull(raw []byte) bool { return len(raw) == 0 || string(raw) == "null" }

func decodeReviewObject(raw []byte) (*unstructured.Unstructured, error) {
	if isNull(raw) {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func reviewRef(b *binding.Binding, req *admissionv1.AdmissionRequest) *tetherv1.ObjectRef {
	r := b.Resource
	return &tetherv1.ObjectRef{
		Resource:  &tetherv1.Resource{Group: r.Group, Version: r.Version, Resource: r.Resource, Kind: r.Kind, Namespaced: r.Namespaced},
		Namespace: req.Namespace,
		Name:      req.Name,
	}
}

func admissionOperation(op admissionv1.Operation) tetherv1.AdmissionOperation {
	switch op {
	case admissionv1.Create:
		return tetherv1.AdmissionOperation_ADMISSION_OPERATION_CREATE
	case admissionv1.Update:
		return tetherv1.AdmissionOperation_ADMISSION_OPERATION_UPDATE
	case admissionv1.Delete:
		return tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE
	case admissionv1.Connect:
		return tetherv1.AdmissionOperation_ADMISSION_OPERATION_CONNECT
	}
	return tetherv1.AdmissionOperation_ADMISSION_OPERATION_UNSPECIFIED
}

func outcomeName(o tetherv1.Outcome) string {
	switch o {
	case tetherv1.Outcome_OUTCOME_OK:
		return "OK"
	case tetherv1.Outcome_OUTCOME_RETRY:
		return "RETRY"
	case tetherv1.Outcome_OUTCOME_FAIL:
		return "FAIL"
	}
	return "no outcome"
}
