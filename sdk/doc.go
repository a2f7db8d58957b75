// Package sdk is the Go SDK for Tether handlers.
//
// A handler is a process that subscribes to Kubernetes objects through the
// Tether broker. The broker watches the cluster, owns the finalizers, keeps
// the progress records and sends the handler one delivery per thing to do;
// the handler answers each with an outcome. This package hides the gRPC
// session behind plain Go: register functions with the On* methods, then
// call Run.
//
//	h := sdk.New("secret-ttl", sdk.WithTokenFile("/var/run/secrets/tokens/tether"))
//	h.OnCreate(sdk.GVR("", "v1", "secrets"), expire,
//		sdk.AnnotationPresent("example.com/ttl"))
//	h.OnDelete(sdk.GVR("", "v1", "secrets"), cleanup, sdk.Finalizer(sdk.FinalizerStrict))
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	if err := h.Run(ctx, "tether-broker.tether-system.svc:7443"); err != nil {
//		log.Fatal(err)
//	}
//
// # Handler functions
//
// A Func receives a context and an *Event: the object as the broker saw it
// and, for updates, the old side and the diff. Its return value is the
// outcome:
//
//   - nil: done. The patches (SetLabel, SetAnnotation, Patch, PatchStatus)
//     and the result (SetResult) collected on the event are applied by the
//     broker.
//   - RetryAfter(err, d): try again after d.
//   - any other error: try again after the binding's backoff.
//   - Permanent(err): give up; the failure is recorded as a Kubernetes Event.
//
// A panic is recovered, logged with its stack, and retried. Deliveries are
// at least once: write functions so that running one twice does no harm.
//
// A function posts Kubernetes Events with Record (about the delivery's
// object) and RecordAbout (about another object), whatever it returns:
//
//	ev.Record(sdk.Normal, "Provisioned", "the volume is ready")
//	ev.RecordAbout(sdk.ObjectRef{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: pod}, sdk.Warning, "Evicted", msg)
//
// They travel in the ack, and the broker posts them as the handler's own
// identity, so its RBAC needs create and patch on events; repeats are
// counted into one Event and floods rate-limited, as client-go's recorder
// does. At most 10 per delivery; a daemon has no ack and posts none. A
// broker that lists its capabilities without HANDLER_EVENTS posts none
// either: the SDK drops them with a warning. Handler.BrokerCapabilities
// says what the broker offered (docs/protocol.md, "Capabilities").
//
// Functions run concurrently, at most the window (WithWindow) at once, one
// at a time per object (daemons aside: see below). The context ends at the
// delivery's deadline, when the broker withdraws the delivery
// (context.Cause is then ErrCancelled), or when the handler stops.
//
// # Timers and daemons
//
// OnTimer calls a function periodically for every matching object. The
// broker schedules the ticks, one at a time per object, so a slow function
// gets its ticks late, never piled up; a tick is handled like any other
// delivery and its event carries Scheduled, when it was due:
//
//	h.OnTimer(sdk.GVR("", "v1", "secrets"), time.Minute, func(ctx context.Context, ev *sdk.Event) error {
//		if expired(ev.Object()) {
//			return deleteSecret(ctx, ev.Namespace, ev.Name)
//		}
//		return nil
//	}, sdk.AnnotationPresent("example.com/ttl"), sdk.Idle(10*time.Second))
//
// OnDaemon runs a function once per matching object, in its own goroutine,
// for as long as the broker wants it: its context ends when the object is
// deleted or stops matching, when the object moves to another instance, or
// when the session with the broker ends (the broker starts the daemon again
// where it belongs). Return soon after the context ends. A daemon does not
// count against the window, and it has no ack: patches set on its event are
// ignored, with a warning (write with a Kubernetes client instead). With
// Restart, the broker starts a daemon that returned by itself again: after
// the delay of a RetryAfter error, else with backoff. Its event's Attempt
// is one more than its runs in a row that returned an error:
//
//	h.OnDaemon(sdk.GVR("apps", "v1", "deployments"), func(ctx context.Context, ev *sdk.Event) error {
//		return follow(ctx, ev.Namespace, ev.Name) // until ctx ends
//	}, sdk.Restart(), sdk.CancellationTimeout(30*time.Second))
//
// Timers and daemons hold their objects (the finalizer tether.dev/<handler>)
// until they are stopped, unless Finalizer(FinalizerNone) is given.
//
// # Admission
//
// OnValidate and OnMutate answer the API server's admission reviews. The
// broker serves the webhooks and forwards each review over the stream, so a
// handler serves no HTTPS and can run on a laptop. An AdmissionFunc gets a
// *Review and returns nil to allow, Deny or DenyWithCode to refuse; Warn
// adds a warning for the client. A mutate function changes Review.Object in
// place and the SDK answers with the JSON patch from the request's object to
// the changed one:
//
//	h.OnValidate(sdk.GVR("", "v1", "secrets"), func(ctx context.Context, r *sdk.Review) error {
//		if r.Object.GetAnnotations()["example.com/owner"] == "" {
//			return sdk.Deny("the annotation example.com/owner is required")
//		}
//		return nil
//	}, sdk.Operations(sdk.OpCreate, sdk.OpUpdate))
//	h.OnMutate(sdk.GVR("", "v1", "configmaps"), func(ctx context.Context, r *sdk.Review) error {
//		labels := r.Object.GetLabels()
//		if labels == nil {
//			labels = map[string]string{}
//		}
//		labels["example.com/reviewed"] = "true"
//		r.Object.SetLabels(labels)
//		return nil
//	}, sdk.Timeout(5*time.Second))
//
// Any other error, a panic, or no answer before the webhook's timeout is a
// failure, and the binding's failure policy (Failure) decides: by default
// the request is admitted (FailOpen), so that a broken handler never blocks
// the cluster. For the same reason the broker removes a handler's webhooks
// when it has been absent past its grace, unless the binding has
// Finalizer(FinalizerStrict): then requests are refused while it is away.
//
// # Sessions
//
// Run connects, sends the bindings and then handles deliveries. A lost
// connection is re-established with exponential backoff, forever; a broker
// that rejects the handler (a binding that names an unknown resource, CEL
// that does not compile, a missing permission, a bad token) ends Run with a
// *RejectedError naming the problem. When Run's context is cancelled, the
// handler stops taking deliveries, lets those in flight finish (up to
// WithDrainTimeout), says goodbye so the broker hands its objects to other
// instances at once, and Run returns nil. Daemons are stopped whenever a
// session ends, waiting for them up to the drain timeout as well.
//
// A handler with validate or mutate bindings whose broker address yields
// several replicas (a DNS name such as the headless Service
// "tether-broker-replicas.tether-system.svc:7443", or a RoundRobin dialer)
// keeps one session to each, so that whichever replica the API server
// calls answers its reviews without waiting for a leader.
//
// Connections use TLS and a bearer token (by default the first of
// DefaultTokenPaths that exists: a projected token for the broker's
// audience, else the pod's ServiceAccount token, re-read on every
// connection attempt). WithInsecure
// is for a broker started in development mode on loopback.
package sdk
