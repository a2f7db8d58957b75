package chaos

import "time"

// History is everything a run saw, for the checker to judge after the
// fact: what the load generator and the foreign controller wrote, what the
// handlers were given and answered, the faults, the states the API server
// showed, the broker's Events, and the objects at the end. Times are wall
// clock on this machine; every process here shares it.
type History struct {
	Seed int64
	// Handler is the handler's name: its holds are HoldPrefix+Handler.
	Handler string
	// Start is when the load began; Quiet when the last fault was healed
	// and the load stopped; End when the final state was read.
	Start, Quiet, End time.Time
	// Grace is the handlers' grace; Bound is how long after Quiet (and
	// after a grace, where one applies) the contract's releases must have
	// happened.
	Grace, Bound time.Duration

	Ops          []Op
	Deliveries   []Delivery
	Faults       []Fault
	Observations []Observation
	Events       []Event
	Final        []Object
	// Brokers are what each broker process left behind.
	Brokers []BrokerReport
	// Warnings counts the API server's warnings to the load: each review
	// that failed open (no instance, no answer in time) sends one.
	Warnings int64
}

// Resources the load works on.
const (
	Widgets    = "widgets"
	ConfigMaps = "configmaps"
)

// The handler's bindings, by id, as the chaos handler declares them. On
// widgets: create, update, delete (HOLD), a HOLD timer, a daemon, an event
// binding and a validate binding. On ConfigMaps: a STRICT delete and a NONE
// timer.
const (
	BindingCreate       = "create"
	BindingUpdate       = "update"
	BindingDelete       = "delete"        // HOLD, widgets
	BindingStrictDelete = "strict-delete" // STRICT, configmaps
	BindingTimer        = "tick"          // HOLD, widgets
	BindingNoneTimer    = "tick-none"     // NONE, configmaps
	BindingDaemon       = "daemon"        // HOLD, widgets
	BindingEvent        = "event"
	BindingValidate     = "validate"
)

// Op is one write the load generator or the foreign controller made.
type Op struct {
	At              time.Time
	Kind            OpKind
	Resource        string // Widgets or ConfigMaps
	Namespace, Name string
	// UID is the object's UID: the one created, or the one written to.
	UID string
	// Err is the API server's refusal, if any; a refused op did nothing.
	Err string
}

// OpKind names a write.
type OpKind string

// The writes.
const (
	OpCreate OpKind = "create"
	OpUpdate OpKind = "update"
	OpDelete OpKind = "delete"
	// OpForeignAdd and OpForeignRemove are the foreign controller adding
	// and removing its own finalizer, ForeignFinalizer.
	OpForeignAdd    OpKind = "foreign-add"
	OpForeignRemove OpKind = "foreign-remove"
)

// ForeignFinalizer is the finalizer of the foreign controller, which
// Tether must never remove.
const ForeignFinalizer = "example.com/foreign"

// HoldPrefix starts every Tether hold.
const HoldPrefix = "tether.dev/"

// Delivery is one delivery as the handler instance that got it logged it,
// written when its function returned.
type Delivery struct {
	// Received is when the function was called; Answered when it returned
	// and its ack was handed to the SDK.
	Received, Answered time.Time
	Instance           string // the handler instance (its process)
	Binding            string // one of the Binding* ids
	Kind               string // "create", "update", "delete", "tick", "daemon", "event", "validate"
	Resource           string
	Namespace, Name    string
	UID                string
	ResourceVersion    string
	Attempt            int
	// Outcome is "ok", "retry" or "fail". A daemon logs "ok" when it
	// returned because it was told to stop.
	Outcome string
}

// Fault is one injected fault.
type Fault struct {
	At time.Time
	// Healed is when it ended (a process restarted, a proxy fixed); zero
	// for an instant fault whose effect the system heals by itself.
	Healed time.Time
	Kind   FaultKind
	Target string // the process or link, e.g. "handler-1", "broker-a", "broker->apiserver"
	Detail string
}

// FaultKind names a kind of fault.
type FaultKind string

// The faults.
const (
	FaultHandlerKill    FaultKind = "handler-kill" // SIGKILL, restarted after a pause
	FaultHandlerStop    FaultKind = "handler-stop" // SIGSTOP, SIGCONT after a pause
	FaultLeaderKill     FaultKind = "leader-kill"  // SIGKILL of the leading broker, restarted
	FaultLeaderStop     FaultKind = "leader-stop"  // SIGSTOP of the leading broker, SIGCONT after a pause
	FaultAPIRestart     FaultKind = "apiserver-restart"
	FaultEtcdRestart    FaultKind = "etcd-restart"    // stopped and started again; the API server's watches resume
	FaultEtcdCompact    FaultKind = "etcd-compact"    // compacted while cut off from the API server: all relist (410 Gone)
	FaultNetLatency     FaultKind = "net-latency"     // through toxiproxy
	FaultNetReset       FaultKind = "net-reset"       // connections reset
	FaultNetBlackhole   FaultKind = "net-blackhole"   // nothing gets through, then healed
	FaultHandlerRollout FaultKind = "handler-rollout" // every instance replaced, one at a time
)

// Observation is one state of an object the run's own watch showed.
type Observation struct {
	At              time.Time
	Resource        string
	Namespace, Name string
	UID             string
	ResourceVersion string
	Finalizers      []string
	Deleting        bool // deletionTimestamp set
	Gone            bool // the watch said DELETED
}

// Event is one Kubernetes Event about an object.
type Event struct {
	At      time.Time
	UID     string // the involved object's
	Reason  string // e.g. "HoldReleased", "RetriesExhausted", "DaemonStopTimeout"
	Message string // names the rule, e.g. "(rule 3c)"
}

// Object is one object as it was at the end.
type Object struct {
	Resource        string
	Namespace, Name string
	UID             string
	Finalizers      []string
	Deleting        bool
	// DeletingSince is its deletionTimestamp, when Deleting.
	DeletingSince time.Time
}

// BrokerReport is what one broker replica left: whether any of its
// processes panicked, and the goroutines and resident memory of the one
// that led longest.
type BrokerReport struct {
	Name   string
	Panics []string // the lines that begin a panic or a fatal error
	// Goroutines and RSS are sampled from its metrics every 10 s; of the
	// process that led longest, First is its first sample once warm (30 s
	// after it began to lead), Last its last as leader, Sampled the time
	// between them and Process which start of the replica it was (1 for
	// the first). Zero when no process led long enough.
	Process                         int
	Sampled                         time.Duration
	FirstGoroutines, LastGoroutines int
	FirstRSS, LastRSS               int64
}
