package sdktest

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// Verdict is what a validate or mutate function answered to one review.
type Verdict struct {
	Binding string
	Allowed bool
	// Message and Code are the refusal's (Code 0: the API server's 403).
	Message  string
	Code     int
	Warnings []string
	// Patch is a mutate function's RFC 6902 JSON patch, nil when it
	// changed nothing.
	Patch []byte
}

// Validate reviews op on obj (old: the object before, for an update or a
// delete) with the handler's validate binding for obj's resource.
func (b *Broker) Validate(op sdk.Operation, obj, old *unstructured.Unstructured) Verdict {
	b.t.Helper()
	return b.ReviewWith(b.binding(tetherv1.BindingKind_BINDING_KIND_VALIDATE, obj), op, obj, old)
}

// Mutate reviews op on obj with the handler's mutate binding for obj's
// resource.
func (b *Broker) Mutate(op sdk.Operation, obj, old *unstructured.Unstructured) Verdict {
	b.t.Helper()
	return b.ReviewWith(b.binding(tetherv1.BindingKind_BINDING_KIND_MUTATE, obj), op, obj, old)
}

// reviewOperations are the wire names of the operations.
var reviewOperations = map[sdk.Operation]tetherv1.AdmissionOperation{
	sdk.OpCreate:  tetherv1.AdmissionOperation_ADMISSION_OPERATION_CREATE,
	sdk.OpUpdate:  tetherv1.AdmissionOperation_ADMISSION_OPERATION_UPDATE,
	sdk.OpDelete:  tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE,
	sdk.OpConnect: tetherv1.AdmissionOperation_ADMISSION_OPERATION_CONNECT,
}

// ReviewWith reviews op on obj with the admission binding of that id, as
// user "sdktest".
func (b *Broker) ReviewWith(bindingID string, op sdk.Operation, obj, old *unstructured.Unstructured) Verdict {
	b.t.Helper()
	pb := b.bindingByID(bindingID)
	if k := pb.GetKind(); k != tetherv1.BindingKind_BINDING_KIND_VALIDATE && k != tetherv1.BindingKind_BINDING_KIND_MUTATE {
		b.t.Fatalf("sdktest: binding %q is a %v binding, not validate or mutate", bindingID, k)
	}
	d := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION, BindingId: bindingID, Attempt: 1,
		Object: encode(b.t, obj), Ref: ref(pb, obj), Deadline: timestamppb.New(time.Now().Add(Timeout)),
		Admission: &tetherv1.AdmissionRequest{Uid: "sdktest-review", Operation: reviewOperations[op], UserName: "sdktest",
			UserGroups: []string{"system:authenticated"}}}
	if old != nil {
		d.OldObject = encode(b.t, old)
	}
	ack, err := b.deliver(d)
	if err != nil {
		b.t.Fatalf("sdktest: reviewing %s of %s with %q: %v", op, obj.GetName(), bindingID, err)
	}
	a := ack.GetAdmission()
	return Verdict{Binding: bindingID, Allowed: a.GetAllowed(), Message: a.GetMessage(), Code: int(a.GetCode()),
		Warnings: a.GetWarnings(), Patch: a.GetPatch()}
}
