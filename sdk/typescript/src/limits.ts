// The protocol's limits and the SDK's defaults, each defined once here (the
// broker's are in proto/tether/v1/limits.go; docs/protocol.md lists them).

/** The broker's default bound on one message from an instance (DefaultMaxMessageBytes). */
export const MAX_MESSAGE_BYTES = 4 << 20;
/** Ack.message and an Event's message are cut at this many bytes (MaxEventMessageBytes). */
export const MAX_EVENT_MESSAGE_BYTES = 1024;
/** The largest message the SDK accepts from the broker: objects travel whole, with their old side and diff. */
export const MAX_RECEIVE_BYTES = 32 << 20;

/** Deliveries run at once unless the options say otherwise. */
export const DEFAULT_WINDOW = 16;
/**
 * Reconnect delays, in milliseconds: 500 doubling to 2000 (as the Go SDK),
 * well inside the broker's default grace of 30 s.
 */
export const DEFAULT_RECONNECT_MIN = 500;
export const DEFAULT_RECONNECT_MAX = 2000;
/** How long a stopping handler waits for deliveries in flight, in milliseconds. */
export const DEFAULT_DRAIN_TIMEOUT = 10_000;
/** The in-cluster ServiceAccount token, read on every connection attempt. */
export const DEFAULT_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/**
 * A projected ServiceAccount token meant for the broker alone (audience tether.dev/broker, the
 * broker's --token-audience in deploy/), where the handler's manifests mount one.
 */
export const DEFAULT_BROKER_TOKEN_FILE = "/var/run/secrets/tether.dev/token";
/** Read when no token or tokenFile is given: the first that exists, at each connection attempt. */
export const DEFAULT_TOKEN_FILES = [DEFAULT_BROKER_TOKEN_FILE, DEFAULT_TOKEN_FILE];

/** The broker answers Hello well within this; past it, the SDK reconnects. */
export const WELCOME_TIMEOUT = 30_000;
/** Bounds the wait for the broker to end the stream after the Goodbye. */
export const CLOSE_TIMEOUT = 5_000;
/** Bounds the opening of a connection (TCP, TLS, HTTP/2), as the Go SDK's ConnectTimeout. */
export const CONNECT_TIMEOUT = 5_000;
/**
 * How often a handler connected to every broker replica looks up the
 * replicas' addresses again (and at once whenever one of its sessions
 * ends), so that a new replica gets a session within seconds; the Go SDK's
 * ResolveEvery.
 */
export const RESOLVE_EVERY = 5_000;
/** The broker permits pings every 10 s; the SDKs ping every 30 s with a 10 s timeout. */
export const KEEPALIVE_TIME = 30_000;
export const KEEPALIVE_TIMEOUT = 10_000;

export const PROTOCOL_VERSION = "v1";
