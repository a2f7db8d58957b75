"""Limits of the protocol, as proto/tether/v1/limits.go and the Go SDK have
them. The broker refuses what goes past them, so the SDK checks first and
says why, instead of sending what would end the session."""

# Ack.progress (a RETRY's record of the subhandlers done, kept by the broker
# in memory between attempts); a larger one turns the RETRY into a FAIL.
MAX_PROGRESS_BYTES = 16 << 10
# Ack.result is stored in an annotation; annotations share 256 KiB per object.
MAX_RESULT_BYTES = 16 << 10
# Binding.result_key: a key of status, as long as the longest Kubernetes name.
MAX_RESULT_KEY_BYTES = 253
# Binding.namespaces; each costs the broker a watch and access reviews.
MAX_NAMESPACES = 100
# The namespaces of all the bindings of one Hello, counted once per binding.
MAX_HELLO_NAMESPACES = 500
# The broker's default bound on one message from a handler; a larger
# answer would end the session and the delivery would come again.
DEFAULT_MAX_MESSAGE_BYTES = 4 << 20
# AckBatch.acks: at most this many acks in one batch (CAPABILITY_ACK_BATCH).
MAX_ACK_BATCH = 1024
# Ack.message and admission warnings become Kubernetes Event messages and
# client output: the Go SDK cuts them at 1024 bytes.
MAX_MESSAGE = 1024
# A handler name or binding id: a DNS-1123 label of at most 40 characters.
MAX_NAME_LENGTH = 40
# A namespace name: a DNS-1123 label, as Kubernetes has it.
MAX_NAMESPACE_LENGTH = 63
# The shortest timer interval the broker accepts, in seconds.
MIN_TIMER_INTERVAL = 0.1
# A webhook's timeout: whole seconds from 1 to 30 (the API server's bounds).
MIN_WEBHOOK_TIMEOUT = 1
MAX_WEBHOOK_TIMEOUT = 30
# Match conditions per webhook: the API server takes 64, the broker adds one.
MAX_MATCH_CONDITIONS = 63
# Hello.priority: 0 (the default) to 1000; the highest connected take all.
MAX_PRIORITY = 1000
# Ack.events: at most this many Events per delivery; the rest are dropped.
MAX_ACK_EVENTS = 10
# An Event's reason, as the events API bounds it.
MAX_EVENT_REASON_BYTES = 128
# An Event's message, as the events API bounds an Event's note: cut with
# an ellipsis past it.
MAX_EVENT_MESSAGE_BYTES = 1024
