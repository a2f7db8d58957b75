package tetherv1

// Limits of the protocol that both ends check: the broker refuses what goes
// past them, and the SDKs say so to the handler before sending.

// MaxResultBytes bounds Ack.result. Results are stored in annotations,
// which share 256 KiB per object with every other controller's and with
// each handler's last-handled state (up to 64 KiB), so one handler's result
// must stay small.
const MaxResultBytes = 16 << 10

// MaxNamespaces bounds Binding.namespaces. Each namespace costs the broker
// a watch and a few access reviews; past this many, bind cluster-wide and
// narrow with a label selector or a CEL condition.
const MaxNamespaces = 100

// MaxHelloNamespaces bounds the namespaces of all the bindings of one
// Hello, counted once per binding.
const MaxHelloNamespaces = 500

// DefaultMaxMessageBytes is the broker's default bound on one message from
// a handler (--max-message-size). The SDKs fail a delivery whose answer
// would be larger, rather than send what the broker cannot take.
const DefaultMaxMessageBytes = 4 << 20

// MaxPriority bounds Hello.priority (from 0). Priorities rank instances,
// they are not weights, so a few levels are plenty; the bound turns a value
// that is surely a mistake (a timestamp, a port) into an error at Hello.
const MaxPriority = 1000

// MaxAckEvents bounds Ack.events: a handler's Events are a few notes per
// delivery, and client-go's recorder rate-limits more per object anyway.
const MaxAckEvents = 10

// MaxEventReasonBytes bounds HandlerEvent.reason, as the events API bounds
// an Event's reason.
const MaxEventReasonBytes = 128

// MaxEventMessageBytes bounds HandlerEvent.message, as the events API
// bounds an Event's note; a longer message is cut with an ellipsis.
const MaxEventMessageBytes = 1024

// MaxResultKeyBytes bounds Binding.result_key: a status key as long as the
// longest Kubernetes name, which Kopf's handler ids (a function's qualified
// name, a field's path, a parent's id) stay well within.
const MaxResultKeyBytes = 253

// MaxProgressBytes bounds Ack.progress: the broker keeps it in memory for
// each object and binding in backoff, so it is a record of how far an
// attempt got (which steps are done), not a place for data.
const MaxProgressBytes = 16 << 10

// MaxAckBatch bounds AckBatch.acks: the broker's default largest window
// (session.DefaultMaxWindow), so that an instance with such a window sends
// all its acks ready at once in one batch. The bound keeps the work one
// message asks of the broker's reader close to what a window of acks asks.
const MaxAckBatch = 1024

// MaxDeliveryBatch and MaxDeliveryBatchBytes bound a DeliveryBatch: as
// many deliveries as the largest window, and at most 1 MiB of encoding,
// well under the 4 MiB a gRPC client takes by default. A delivery that
// would take a batch past 1 MiB goes in a message of its own, so a batch
// is never a larger message than 1 MiB or its largest delivery alone.
const (
	MaxDeliveryBatch      = MaxAckBatch
	MaxDeliveryBatchBytes = 1 << 20
)
