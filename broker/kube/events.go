package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventSink posts the Events of client-go's record.EventBroadcaster with
// Client, each in its own namespace, as the clientset's EventSinkImpl does
// (a record.EventSink).
type EventSink struct{ Client Interface }

func (s EventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(e.Namespace).Create(context.Background(), e, metav1.CreateOptions{})
}

func (s EventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(e.Namespace).Update(context.Background(), e, metav1.UpdateOptions{})
}

// Patch merges data into the Event, as a strategic merge patch: what the
// broadcaster sends when it counts a repeat.
func (s EventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(e.Namespace).Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
