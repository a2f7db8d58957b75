package informer

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// served is a Widget as kube-apiserver sends it, managedFields included.
const served = `{"apiVersion":"test.tether.dev/v1","kind":"Widget","metadata":{"creationTimestamp":"2026-12-01T10:00:00Z",` +
	`"finalizers":["tether.dev/h"],"generation":1,"labels":{"app":"a"},"managedFields":[{"apiVersion":"test.tether.dev/v1",` +
	`"fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:size":{}}},"manager":"kubectl","operation":"Update",` +
	`"time":"2026-12-01T10:00:00Z"}],"name":"w","namespace":"ns","resourceVersion":"17","uid":"u1"},"spec":{"size":3}}`

func TestFromJSONKeepsEverythingButManagedFields(t *testing.T) {
	o, err := Read([]byte(served))
	if err != nil {
		t.Fatal(err)
	}
	if o.Namespace != "ns" || o.Name != "w" || o.UID != "u1" || o.ResourceVersion != "17" || o.Deleting {
		t.Errorf("fields %+v", o)
	}
	if strings.Contains(string(o.Raw), "managedFields") {
		t.Errorf("managedFields cached: %s", o.Raw)
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(served), &want); err != nil {
		t.Fatal(err)
	}
	delete(want["metadata"].(map[string]any), "managedFields")
	var got map[string]any
	if err := json.Unmarshal(o.Raw, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cached\n%v\nwant\n%v", got, want)
	}
}

func TestFromJSONWithoutManagedFieldsKeepsTheBytes(t *testing.T) {
	in := `{"metadata":{"name":"w","namespace":"ns","uid":"u1","resourceVersion":"3","deletionTimestamp":"2026-12-01T10:00:00Z"},"data":{"a":"b"}}`
	o, err := Read([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Raw) != in || !o.Deleting {
		t.Errorf("raw %s deleting %v", o.Raw, o.Deleting)
	}
}

func TestFromJSONRefusesWhatIsNotAnObject(t *testing.T) {
	for _, in := range []string{`[1]`, `{"metadata":[]}`, `{"metadata":{"name":3}}`, `{`} {
		if _, err := Read([]byte(in)); err == nil {
			t.Errorf("%s read as an object", in)
		}
	}
}

func TestListFromJSONKeepsTheListMetadata(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"40","continue":"next"},"items":[` + served + `]}`
	l, err := listFromJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != "40" || l.Continue != "next" || len(l.Items) != 1 {
		t.Fatalf("list %+v", l.ListMeta)
	}
	if o := l.Items[0].Object.(*Object); o.Name != "w" {
		t.Errorf("item %+v", o)
	}
}

// TestWatchReadsEveryKindOfEvent: objects in their cached form, a bookmark
// that ends the initial events with its annotation (the reflector waits for
// it), an error as a Status (a 410 must reach the reflector as one), then
// the end of the stream closes the channel.
func TestWatchReadsEveryKindOfEvent(t *testing.T) {
	stream := `{"type":"ADDED","object":` + served + `}
{"type":"BOOKMARK","object":{"kind":"Widget","metadata":{"resourceVersion":"18","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}}
`
	w := newObjectWatch(io.NopCloser(strings.NewReader(stream)))
	defer w.Stop()
	var evs []watch.Event
	for ev := range w.ResultChan() {
		evs = append(evs, ev)
	}
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3: %v", len(evs), evs)
	}
	if o, ok := evs[0].Object.(*Object); evs[0].Type != watch.Added || !ok || o.Name != "w" {
		t.Errorf("first event %v %+v", evs[0].Type, evs[0].Object)
	}
	m, err := meta.Accessor(evs[1].Object) // as the reflector reads it
	if evs[1].Type != watch.Bookmark || err != nil || m.GetResourceVersion() != "18" || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark %v %v %v", evs[1].Type, m, err)
	}
	if st, ok := evs[2].Object.(*metav1.Status); evs[2].Type != watch.Error || !ok || st.Code != 410 {
		t.Errorf("error event %v %+v", evs[2].Type, evs[2].Object)
	}
}

func TestWatchReportsAStreamItCannotRead(t *testing.T) {
	for _, frame := range []string{
		`{"type":"ADDED","object":[1]}`,
		`{"type":"MODIFIED","object":null}`,
		`{"type":"DELETED"}`,
		`{"type":"ADDED","object":{"metadata":{"name":"w"}`,
	} {
		t.Run(frame, func(t *testing.T) {
			w := newObjectWatch(io.NopCloser(strings.NewReader(frame)))
			defer w.Stop()
			ev, ok := <-w.ResultChan()
			if st, isStatus := ev.Object.(*metav1.Status); !ok || ev.Type != watch.Error || !isStatus || st.Code != 500 {
				t.Errorf("event %v %+v", ev.Type, ev.Object)
			}
			if _, open := <-w.ResultChan(); open {
				t.Error("the watch went on after an event it could not read")
			}
		})
	}
}

func TestResourcePath(t *testing.T) {
	for key, want := range map[Key]string{
		{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}}:                                           "/api/v1/secrets",
		{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "ns"}:                          "/api/v1/namespaces/ns/secrets",
		{Resource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}, Namespace: "a"}: "/apis/test.tether.dev/v1/namespaces/a/widgets",
	} {
		if got := strings.Join(Path(key), "/"); got != want {
			t.Errorf("%v: %s, want %s", key, got, want)
		}
	}
}

// BenchmarkFromJSON against what the informer did before: decode the whole
// object, then encode it without managedFields.
func BenchmarkFromJSON(b *testing.B) {
	data := []byte(served)
	b.Run("Read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Read(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unstructured+Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(data); err != nil {
				b.Fatal(err)
			}
			if _, err := Encode(u); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWatchEvent reads watch events as the watch does (encoding/json's
// Decoder, then the object's cached form) against checking each object's
// JSON again after the Decoder did (Read, what the watch did before).
func BenchmarkWatchEvent(b *testing.B) {
	frame := []byte(`{"type":"MODIFIED","object":` + served + "}\n")
	for _, bc := range []struct {
		name string
		read func([]byte) (*Object, error)
	}{
		{"checked once", fromValidJSON},
		{"checked again", Read},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			stream := bytes.NewReader(nil)
			for b.Loop() {
				stream.Reset(frame)
				var ev watchFrame
				if err := json.NewDecoder(stream).Decode(&ev); err != nil {
					b.Fatal(err)
				}
				if _, err := bc.read(ev.Object); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
