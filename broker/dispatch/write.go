package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/jsonpatch"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/progress"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// FieldManager names the broker in managedFields.
const FieldManager = "tether-broker"

// accumulated collects what the acks of one change asked to write.
type accumulated struct {
	merge   map[string]any    // merge patch for the object
	status  map[string]any    // merge patch for status, with the results stored there
	results map[string]string // binding id -> result JSON, for the annotations
	// as is the identity of the instance whose ack asked for the last of
	// it; nil in insecure mode.
	as *authenticationv1.UserInfo
}

// add takes the patch, status patch and result of an OK ack of b. A patch
// that is not a JSON object, or that touches what a handler may not write,
// is an error and nothing of the ack is taken.
func (a *accumulated) add(b *binding.Binding, ack *tetherv1.Ack, as *authenticationv1.UserInfo) error {
	merge, err := jsonpatch.DecodeMerge(ack.GetPatch())
	if err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	status, err := jsonpatch.DecodeMerge(ack.GetStatusPatch())
	if err != nil {
		return fmt.Errorf("status_patch: %w", err)
	}
	if err := checkPatch(merge); err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	if s, ok := merge["status"]; ok {
		sm, isMap := s.(map[string]any)
		if !isMap {
			return errors.New("patch: status must be an object")
		}
		status = jsonpatch.ComposeMerge(sm, status)
		delete(merge, "status")
	}
	r := ack.GetResult()
	if len(r) > 0 {
		if err := checkResult(r); err != nil {
			return err
		}
		if b.Results.Status {
			// After the handler's own status patch, as Kopf stores a
			// return value after the patch its function made.
			status = jsonpatch.ComposeMerge(status, statusResult(b.Results.Key, r))
		} else {
			if a.results == nil {
				a.results = map[string]string{}
			}
			a.results[b.ID] = string(r)
		}
	}
	if len(merge) > 0 || len(status) > 0 || len(r) > 0 {
		a.as = as
	}
	if len(merge) > 0 {
		a.merge = jsonpatch.ComposeMerge(a.merge, merge)
	}
	if len(status) > 0 {
		a.status = jsonpatch.ComposeMerge(a.status, status)
	}
	return nil
}

// checkResult bounds a result and checks that it is JSON.
func checkResult(r []byte) error {
	if len(r) > tetherv1.MaxResultBytes {
		return fmt.Errorf("result: %d bytes, more than the %d a result may have", len(r), tetherv1.MaxResultBytes)
	}
	if !json.Valid(r) {
		return errors.New("result: not valid JSON")
	}
	return nil
}

// statusResult is the merge patch for status that stores the valid JSON r
// under key: an object is merged into what key holds, any other value
// replaces it, and null stores nothing (nil), as Kopf skips a None.
func statusResult(key string, r []byte) map[string]any {
	var v any
	_ = json.Unmarshal(r, &v) // checked by checkResult
	if v == nil {
		return nil
	}
	return map[string]any{key: v}
}

// empty reports whether the acks added nothing to write.
func (a *accumulated) empty() bool {
	return len(a.merge) == 0 && len(a.status) == 0 && len(a.results) == 0
}

// write is what the accumulated acks ask to write for handler: its patch,
// status and results. All of it is the handler's content, dropped together
// when the API server refuses it.

func (a *accumulated) write(handler string) *write {
	w := &write{handlerPatch: a.merge, status: a.status, as: a.as}
	for id, r := range a.results {
		w.handlerPatch = jsonpatch.ComposeMerge(w.handlerPatch, annotation(progress.ResultKey(handler, id), r))
	}
	return w
}

// checkPatch keeps handler patches to what handlers own: top-level fields
// other than apiVersion and kind, and in metadata only labels and
// annotations (not the broker's own). Finalizers are the broker's alone.
func checkPatch(m map[string]any) error {
	for _, k := range []string{"apiVersion", "kind"} {
		if _, ok := m[k]; ok {
			return fmt.Errorf("%s cannot be patched", k)
		}
	}
	md, ok := m["metadata"]
	if !ok {
		return nil
	}
	mdm, ok := md.(map[string]any)
	if !ok {
		return errors.New("metadata must be an object")
	}
	for k, v := range mdm {
		if k != "labels" && k != "annotations" {
			return fmt.Errorf("metadata.%s cannot be patched; only labels and annotations", k)
		}
		vm, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("metadata.%s must be an object", k)
		}
		for key, val := range vm {
			if _, isString := val.(string); val != nil && !isString {
				return fmt.Errorf("metadata.%s[%q] must be a string or null", k, key)
			}
			if k == "annotations" && progress.Ours(key) {
				return fmt.Errorf("metadata.annotations[%q] belongs to the broker", key)
			}
		}
	}
	return nil
}

// write is everything one handling changes on an object.
type write struct {
	handlerPatch map[string]any // the handler's merge patch, with its results
	merge        map[string]any // the broker's own annotations, as a merge patch
	status       map[string]any // merge patch for the status subresource, the handler's
	// as is whom the handler's part is written as (nil: the broker), so
	// that it faces the handler's RBAC and every webhook as if the
	// handler wrote it. A write without the handler's part is the broker's.
	as         *authenticationv1.UserInfo
	addHold    bool
	removeHold bool
	// lastHandled is remembered in memory once the write lands.
	lastHandled map[string]any
	// asIs is the essence of the object the handler was given, when its
	// patch changes it: what is recorded as handled instead when the API
	// server refuses the patch.
	asIs map[string]any
	// release says why removeHold releases, for metrics (default: done or
	// no-longer-matching).
	release string
	// landed is a Normal Event posted on the object once the write landed,
	// which may be passes later when the write waits for its turn.
	landed *note
	// waiting is the request that waits for its turn (see request).
	waiting *request
}

// recordHandled records, as the state handler finished with, the essence
// of obj after the handler's part of w.
func (w *write) recordHandled(handler string, obj map[string]any) error {
	asIs := progress.Essence(obj)
	after := asIs
	if len(w.handlerPatch) > 0 {
		after = progress.Essence(jsonpatch.ApplyMerge(obj, w.handlerPatch))
		w.asIs = asIs
	}
	return w.record(handler, after)
}

// record sets the state recorded as handled: the annotation, and the
// broker's memory of it once the write lands.
func (w *write) record(handler string, essence map[string]any) error {
	enc, err := progress.Encode(essence)
	if err != nil {
		return fmt.Errorf("encoding the last-handled state: %w", err)
	}
	w.setAnnotation(progress.LastHandledKey(handler), enc)
	w.lastHandled = progress.Recorded(essence)
	return nil
}

// dropHandlerPart takes the handler's patch, status and results out of w,
// and records as handled the object as it is.
func (w *write) dropHandlerPart(handler string) error {
	w.handlerPatch, w.status = nil, nil
	if w.asIs == nil {
		return nil
	}
	asIs := w.asIs
	w.asIs = nil
	return w.record(handler, asIs)
}

// note is a Kubernetes Event to post.
type note struct{ reason, message string }

func (w *write) empty() bool {
	return len(w.handlerPatch) == 0 && len(w.merge) == 0 && len(w.status) == 0 && !w.addHold && !w.removeHold
}

// setAnnotation adds one of the broker's annotations to the merge patch.
func (w *write) setAnnotation(key, value string) {
	w.merge = jsonpatch.ComposeMerge(w.merge, annotation(key, value))
}

// annotation is a merge patch that sets one annotation.
func annotation(key, value string) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}}
}

// objectWriter makes one handler's writes to its objects: one guarded JSON
// patch for the hold, the progress and the handler's patch (written as the
// handler), and a merge patch for status, each in its turn under the
// broker's limiters; and it sorts what the API server refused. What to
// write is the controller's decision; how it lands is the writer's.
type objectWriter struct {
	handlerName string
	opts        *Options    // the Manager's: clients, limiters, Events, metrics
	mu          *sync.Mutex // the controller's, which guards the objects' last-seen copy
	// recorded reports whether the handler's Lease records it and the
	// resources it binds (presenceKeeper.recorded): no hold is written
	// before, or a broker that died in between would leave a hold that no
	// record leads the next one to.
	recorded func() bool
	// inFlight bounds the handler's requests under way: half its workers
	// (see WriteLimiter).
	inFlight inFlight
}

// unrecordedWait is how soon a write that adds a hold looks again while
// the handler's Lease is not written yet.
const unrecordedWait = 100 * time.Millisecond

// apply makes the write against the state the pass works on (o.cur): one
// guarded JSON patch for the object and, when the resource has a status
// subresource and the handler patched status, one merge patch for status.
// Each request waits for its turn under the write limiter: until then apply
// returns how long it still is, and the caller looks again then. On success
// the new object is remembered; on a conflict or while waiting for its turn
// the write stays pending, as it does while a hold it adds waits for the
// handler's Lease.
func (ow *objectWriter) apply(ctx context.Context, o *object, w *write) (wait time.Duration, err error) {
	o.work.pending = w
	if w.addHold && ow.recorded != nil && !ow.recorded() {
		return unrecordedWait, nil
	}
	req := w.waiting
	w.waiting = nil
	if req == nil || req.rv != o.cur.ResourceVersion {
		if req, err = ow.request(o, w); err != nil {
			return 0, err
		}
	}
	var after map[string]any // the object as the pass expects it after the write
	if req != nil {
		out, wait, err := ow.inTurn(o, func() (*informer.Object, error) {
			return req.patch(ctx, types.JSONPatchType, req.data)
		})
		if wait > 0 {
			w.waiting = req
			return wait, nil
		}
		ow.measure(metrics.VerbPatch, *o.res, req, w, err)
		if err != nil {
			return 0, ow.failed(o, w, err)
		}
		after = req.after
		if req.guarded {
			ow.remember(o, out, nil)
		} else {
			ow.remember(o, out, after)
		}
		w.handlerPatch, w.merge, w.addHold, w.removeHold = nil, nil, false, false
	}
	if !o.res.HasStatus {
		w.status = nil // it went with the object
	}
	if w.lastHandled != nil {
		o.work.lastHandled = w.lastHandled
	}
	if len(w.status) > 0 {
		if after == nil {
			after = o.decoded().Object
		}
		if wait, err := ow.applyStatus(ctx, o, w, after); wait > 0 || err != nil {
			return wait, err
		}
	}
	o.work.pending = nil
	if w.landed != nil {
		ow.opts.Recorder.Event(o.decoded(), false, w.landed.reason, w.landed.message)
	}
	return 0, nil
}

// applyStatus writes w's status with a merge patch on the status
// subresource; after is the object as the pass expects it before this
// patch.
func (ow *objectWriter) applyStatus(ctx context.Context, o *object, w *write, after map[string]any) (wait time.Duration, err error) {
	status := map[string]any{"status": w.status}
	data, err := json.Marshal(status)
	if err != nil {
		o.work.pending = nil
		return 0, fmt.Errorf("encoding status patch: %w", err)
	}
	patch, err := ow.patcher(o, w.as)
	if err != nil {
		return 0, ow.failed(o, w, err)
	}
	out, wait, err := ow.inTurn(o, func() (*informer.Object, error) {
		return patch(ctx, types.MergePatchType, data, "status")
	})
	if wait > 0 {
		return wait, nil
	}
	ow.measure(metrics.VerbStatusPatch, *o.res, nil, w, err)
	if err != nil {
		return 0, ow.failed(o, w, err)
	}
	// A merge patch is not guarded: the answer may carry another's change.
	ow.remember(o, out, jsonpatch.ApplyMerge(after, status))
	return 0, nil
}

// request is a write's JSON patch for the object, built against one state
// of it. A write that waits for its turn keeps its request: coming back on
// the same state, it is sent as it is, without decoding the object and
// building the patch again. Most waits are for a place in flight, and end
// within milliseconds.
type request struct {
	rv    string // the resourceVersion it was built against
	data  []byte
	patch patchFunc
	// guarded says the patch tests the resourceVersion, so that its answer
	// is the state it was built against with its changes alone; after is
	// that state as the pass expects it (see ownAnswer).
	guarded bool
	after   map[string]any
	// held and deleting say what the state it was built against was, for
	// the metrics of holds added and released.
	held, deleting bool
}

// request builds w's JSON patch against o.cur; nil when w changes nothing
// of the object. Its error is apply's to return.
func (ow *objectWriter) request(o *object, w *write) (*request, error) {
	obj := o.decoded()
	merge := objectMerge(o, w)
	p, guarded, err := ow.buildPatch(obj, merge, w)
	if err != nil {
		o.work.pending = nil
		return nil, err
	}
	if p.Empty() {
		return nil, nil
	}
	var as *authenticationv1.UserInfo
	if len(w.handlerPatch) > 0 {
		as = w.as
	}
	patch, err := ow.patcher(o, as)
	if err != nil {
		return nil, ow.failed(o, w, err)
	}
	data, err := p.JSON()
	if err != nil {
		o.work.pending = nil
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	return &request{rv: o.cur.ResourceVersion, data: data, patch: patch,
		guarded: guarded, after: jsonpatch.ApplyMerge(obj.Object, merge),
		held: hold.Has(obj, ow.handlerName), deleting: obj.GetDeletionTimestamp() != nil}, nil
}

// inTurn makes one request in o's turn (see turn): wait > 0, and no
// request, while the turn is away.
func (ow *objectWriter) inTurn(o *object, request func() (*informer.Object, error)) (out *informer.Object, wait time.Duration, err error) {
	if wait := ow.turn(o); wait > 0 {
		return nil, wait, nil
	}
	start := time.Now() // a real request's time, whatever the injected clock says
	out, err = request()
	ow.inFlight.done(time.Since(start))
	return out, 0, err
}

// objectMerge is what w changes of the object but its hold, as one merge
// patch.
func objectMerge(o *object, w *write) map[string]any {
	merge := jsonpatch.ComposeMerge(w.handlerPatch, w.merge)
	if len(w.status) > 0 && !o.res.HasStatus {
		// Without a status subresource, status is written with the object;
		// w keeps it until the patch lands, for another try.
		merge = jsonpatch.ComposeMerge(merge, map[string]any{"status": w.status})
	}
	return merge
}

// buildPatch renders merge and w's hold as a JSON patch against obj. It
// first tests the UID, so that a write meant for X never lands on a
// re-created X'; guarded says it also tests the resourceVersion.
func (ow *objectWriter) buildPatch(obj *unstructured.Unstructured, merge map[string]any, w *write) (p jsonpatch.Patch, guard bool, err error) {
	ops, guard, err := jsonpatch.FromMergePatch(obj.Object, merge)
	if err != nil {
		return nil, false, fmt.Errorf("building patch: %w", err)
	}
	var holdOps jsonpatch.Patch
	// No finalizer may be added once deletion started.
	if w.addHold && obj.GetDeletionTimestamp() == nil && hold.Add(&holdOps, obj, ow.handlerName) {
		guard = true
	}
	switch {
	case w.removeHold && broken(breakClobber) && len(obj.GetFinalizers()) > 0:
		holdOps.Remove("/metadata/finalizers")
	case w.removeHold:
		hold.Remove(&holdOps, obj, ow.handlerName)
	}
	if len(ops) == 0 && holdOps.Empty() {
		return nil, false, nil
	}
	p.Test("/metadata/uid", string(obj.GetUID()))
	if guard {
		p.Test("/metadata/resourceVersion", obj.GetResourceVersion())
	}
	p = append(p, holdOps...)
	return append(p, ops...), guard, nil
}

// errRefused marks a write of the broker's own (hold, progress) that the
// API server refused for its content; it is retried with backoff, but it
// must not keep an object from its deletion work or from being released.
var errRefused = errors.New("the API server refused the write")

// failed sorts a failed write. A lost race (lostRace) means the object
// moved: retry on the next state. A refusal of the
// content (a policy or webhook: 403 or 400; validation: 422; size: 413)
// drops the handler's part, patch and results, with a Warning Event, and
// the rest is retried at once; when nothing of the handler's was in it, the
// Event says why and the write is retried with backoff.
func (ow *objectWriter) failed(o *object, w *write, err error) error {
	obj := o.decoded()
	switch {
	case apierrors.IsNotFound(err):
		o.work.pending = nil
		return nil
	case lostRace(err):
		return fmt.Errorf("writing %s/%s, which changed since it was read (written again on its next state): %w", obj.GetNamespace(), obj.GetName(), err)
	case refused(err) && (len(w.handlerPatch) > 0 || len(w.status) > 0):
		ow.opts.Recorder.Event(obj, true, "InvalidPatch",
			fmt.Sprintf("the API server refused the patch of handler %q, which is dropped: %v", ow.handlerName, err))
		if err := w.dropHandlerPart(ow.handlerName); err != nil {
			o.work.pending = nil
			return err
		}
		return fmt.Errorf("writing %s/%s: the handler's patch was refused, and the rest is written again without it: %w", obj.GetNamespace(), obj.GetName(), err)
	case refused(err):
		ow.opts.Recorder.Event(obj, true, "WriteRejected",
			fmt.Sprintf("the API server refused the broker's write for handler %q; retrying with backoff: %v", ow.handlerName, err))
		return fmt.Errorf("writing %s/%s: %w: %v", obj.GetNamespace(), obj.GetName(), errRefused, err)
	default:
		return fmt.Errorf("writing %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
}

// lostRace reports whether a write failed because the object changed since
// it was read: a 409, or a 422 for the JSON patch itself (a `test` that
// failed, a path that is no longer there). kube-apiserver answers the
// latter with a bare 422 (reason Invalid, no object named, no causes, and
// since 1.37 not even "test failed" in the message), while a 422 from
// validation names the object and its invalid fields.
func lostRace(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d == nil || (d.Name == "" && len(d.Causes) == 0)
}

// refused reports whether the API server refused a write for what it
// carries rather than for when it came.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// remember keeps the object the API server returned, unless the informer
// already has a newer one, and notes it as the pass's latest write, with
// after, what the pass expected of it (nil: a guarded write, whose answer
// holds its changes alone).
func (ow *objectWriter) remember(o *object, out *informer.Object, after map[string]any) {
	if out == nil {
		return
	}
	o.work.wrote = written{answer: out, after: after}
	ow.mu.Lock()
	defer ow.mu.Unlock()
	if o.obj == nil || out.NewerThan(o.obj) {
		o.obj = out
	}
}
