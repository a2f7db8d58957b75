package binding

// Kind is what a binding subscribes to.
type Kind int

// The binding kinds (see "binding" in the glossary of docs/design.md).
const (
	Create Kind = iota + 1
	Update
	Delete
	Resume
	Field
	Event
	Timer
	Daemon
	Validate
	Mutate
	// Index is served by the session, not the dispatcher: each instance
	// gets every matching object (IndexStream).
	Index
)

var kindNames = map[Kind]string{
	Create: "create", Update: "update", Delete: "delete", Resume: "resume", Field: "field",
	Event: "event", Timer: "timer", Daemon: "daemon", Validate: "validate", Mutate: "mutate",
	Index: "index",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Policy is a binding's finalizer policy.
type Policy int

// The finalizer policies of rule 2 of the contract in docs/design.md.
const (
	PolicyNone Policy = iota
	PolicyHold
	PolicyStrict
)

func (p Policy) String() string {
	switch p {
	case PolicyHold:
		return "HOLD"
	case PolicyStrict:
		return "STRICT"
	default:
		return "NONE"
	}
}

// defaultPolicy is HOLD for the kinds whose work continues into deletion.
func defaultPolicy(k Kind) Policy {
	switch k {
	case Delete, Timer, Daemon:
		return PolicyHold
	default:
		return PolicyNone
	}
}
