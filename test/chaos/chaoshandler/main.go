// Command chaoshandler is the handler instance a chaos run starts as a real
// process (three of them, so that faults can kill, stop and replace them).
// It declares the bindings named in package chaos and writes one JSON line
// per delivery to stdout, when its function returns: a chaos.Delivery,
// which the run collects into its history.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/chaos"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:7443", "broker addresses, comma-separated; dialled in turn, as a Service would")
	name := flag.String("name", "chaos", "handler name")
	ns := flag.String("namespace", "", "the namespace of the load")
	instance := flag.String("instance", "", "instance id")
	grace := flag.Duration("grace", 5*time.Second, "the grace asked for")
	variant := flag.Int("variant", 1, "the bindings' variant: a rollout to another variant changes the timers' interval")
	flag.Parse()

	addrs := strings.Split(*brokers, ",")
	out := &deliveryLog{enc: json.NewEncoder(os.Stdout), instance: *instance}
	interval := time.Duration(*variant) * time.Second
	h := sdk.New(*name,
		sdk.WithInsecure(),
		sdk.WithInstanceID(*instance),
		sdk.WithGrace(*grace),
		sdk.WithReconnectBackoff(50*time.Millisecond, time.Second),
		sdk.WithDialer(sdk.RoundRobin(addrs...)),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: *instance, Output: os.Stderr, Level: hclog.Warn})))
	widgets := sdk.GVR("test.tether.dev", "v1", "widgets")
	configMaps := sdk.GVR("", "v1", "configmaps")
	in := sdk.Namespaces(*ns)
	quick := []sdk.BindingOption{in, sdk.Backoff(100*time.Millisecond, time.Second), sdk.Timeout(5 * time.Second)}

	h.OnCreate(widgets, out.record(chaos.BindingCreate, chaos.Widgets), append(quick, sdk.ID(chaos.BindingCreate))...)
	h.OnUpdate(widgets, out.record(chaos.BindingUpdate, chaos.Widgets), append(quick, sdk.ID(chaos.BindingUpdate))...)
	h.OnDelete(widgets, out.record(chaos.BindingDelete, chaos.Widgets), append(quick, sdk.ID(chaos.BindingDelete), sdk.Finalizer(sdk.FinalizerHold))...)
	h.OnTimer(widgets, interval, out.record(chaos.BindingTimer, chaos.Widgets), append(quick, sdk.ID(chaos.BindingTimer), sdk.Finalizer(sdk.FinalizerHold))...)
	h.OnDaemon(widgets, out.daemon(), in, sdk.ID(chaos.BindingDaemon), sdk.CancellationTimeout(10*time.Second))
	h.OnEvent(widgets, out.record(chaos.BindingEvent, chaos.Widgets), append(quick, sdk.ID(chaos.BindingEvent))...)
	h.OnDelete(configMaps, out.record(chaos.BindingStrictDelete, chaos.ConfigMaps), append(quick, sdk.ID(chaos.BindingStrictDelete), sdk.Finalizer(sdk.FinalizerStrict))...)
	h.OnTimer(configMaps, interval, out.record(chaos.BindingNoneTimer, chaos.ConfigMaps), append(quick, sdk.ID(chaos.BindingNoneTimer), sdk.Finalizer(sdk.FinalizerNone))...)
	// Failing open, with a short timeout: a review the handler cannot
	// answer (stopped, partitioned) admits the load's write in 2 s.
	h.OnValidate(widgets, out.review(), in, sdk.ID(chaos.BindingValidate), sdk.Operations(sdk.OpCreate, sdk.OpUpdate),
		sdk.Failure(sdk.FailOpen), sdk.Timeout(2*time.Second))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The dialer picks the broker; the address only has to resolve.
	if err := h.Run(ctx, addrs[0]); err != nil {
		fmt.Fprintf(os.Stderr, "chaoshandler %s: %v\n", *instance, err)
		os.Exit(1)
	}
}

// deliveryLog writes the deliveries, one JSON line each.
type deliveryLog struct {
	mu       sync.Mutex
	enc      *json.Encoder
	instance string
}

func (l *deliveryLog) write(d chaos.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.enc.Encode(d)
}

// kinds names the event kinds as the history does.
var kinds = map[sdk.EventKind]string{sdk.Watch: "event", sdk.DaemonStart: "daemon"}

func (l *deliveryLog) delivery(binding, resource string, ev *sdk.Event, received time.Time) chaos.Delivery {
	kind, ok := kinds[ev.Kind]
	if !ok {
		kind = ev.Kind.String()
	}
	return chaos.Delivery{
		Received: received, Answered: time.Now(), Instance: l.instance, Binding: binding, Kind: kind,
		Resource: resource, Namespace: ev.Namespace, Name: ev.Name, UID: ev.UID, ResourceVersion: ev.ResourceVersion,
		Attempt: ev.Attempt, Outcome: "ok",
	}
}

// record answers OK at once and logs the delivery.
func (l *deliveryLog) record(binding, resource string) sdk.Func {
	return func(_ context.Context, ev *sdk.Event) error {
		l.write(l.delivery(binding, resource, ev, time.Now()))
		return nil
	}
}

// review allows every request and logs it. On CREATE the object has no
// UID yet.
func (l *deliveryLog) review() sdk.AdmissionFunc {
	return func(_ context.Context, r *sdk.Review) error {
		d := chaos.Delivery{
			Received: time.Now(), Instance: l.instance, Binding: chaos.BindingValidate, Kind: "validate",
			Resource: chaos.Widgets, Namespace: r.Namespace, Name: r.Name, Attempt: 1, Outcome: "ok",
		}
		if r.Object != nil {
			d.UID, d.ResourceVersion = string(r.Object.GetUID()), r.Object.GetResourceVersion()
		}
		d.Answered = time.Now()
		l.write(d)
		return nil
	}
}

// daemon runs until it is told to stop, and logs its start when it does.
func (l *deliveryLog) daemon() sdk.Func {
	return func(ctx context.Context, ev *sdk.Event) error {
		received := time.Now()
		<-ctx.Done()
		l.write(l.delivery(chaos.BindingDaemon, chaos.Widgets, ev, received))
		return nil
	}
}
