// Handlers for the Tether broker on Node.js: register async functions by
// binding kind on a Handler, and run it. See README.md.

export { Handler, untilSignal, type HandlerOptions, type RunOptions } from "./handler";
export type { Resource, BindingOptions, TimerOptions, DaemonOptions, ReviewOptions, AdmissionOptions, HandlerFunction, BindingKindName } from "./binding";
export { DeniedError, type Review, type ReviewAnswer, type ReviewFunction, type PatchOp } from "./admission";
export type { Delivery, Answer, KubeObject, DiffEntry, HandlerEvent, DeliveryKindName } from "./delivery";
export type { BrokerCapabilities } from "./capabilities";
export { TemporaryError, PermanentError, RejectedError, ConfigError } from "./errors";
export { stderrLogger, type Logger } from "./logger";
export { version, sdkName } from "./version";
export { RESOLVE_EVERY } from "./limits";
