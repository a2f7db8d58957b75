package typescript

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var widgetGVR = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}

// widget is a Widget ns/name with nothing but its name.
func widget(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
}
