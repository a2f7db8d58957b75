// The errors a handler function throws to choose its ack's outcome, and the
// one run() throws when the broker refuses the handler.

/**
 * TemporaryError asks the broker to try the delivery again: the ack is
 * RETRY, after `retryAfter` milliseconds, or after the binding's backoff
 * when it is unset or zero. Any other error a function throws is a retry
 * with the binding's backoff too; throw this one to choose the delay.
 */
export class TemporaryError extends Error {
  /** Milliseconds before the next attempt; 0: the binding's backoff. */
  readonly retryAfter: number;

  constructor(message: string, options: { retryAfter?: number; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "TemporaryError";
    this.retryAfter = Math.max(0, options.retryAfter ?? 0);
  }
}

/**
 * PermanentError tells the broker the delivery failed for good: the ack is
 * FAIL, the message becomes a HandlerFailed Event, and the cause is not
 * tried again.
 */
export class PermanentError extends Error {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "PermanentError";
  }
}

/**
 * RejectedError is what run() throws when the broker refuses the handler
 * before welcoming it: a binding it cannot serve, a missing permission, a
 * bad token, an unsupported protocol. Trying again cannot help, so run()
 * does not. `code` is the gRPC status code's name ("InvalidArgument").
 */
export class RejectedError extends Error {
  readonly handler: string;
  readonly code: string;
  readonly details: string;

  constructor(handler: string, code: string, details: string) {
    super(`tether: broker rejected handler "${handler}": ${code}: ${details}`);
    this.name = "RejectedError";
    this.handler = handler;
    this.code = code;
    this.details = details;
  }
}

/** ConfigError is what run() throws for an invalid handler configuration. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** The ack outcome, message and retry delay that an error thrown by a function asks for. */
export function classify(err: unknown): { outcome: "RETRY" | "FAIL"; message: string; retryAfter: number } {
  if (err instanceof PermanentError) {
    return { outcome: "FAIL", message: err.message, retryAfter: 0 };
  }
  if (err instanceof TemporaryError) {
    return { outcome: "RETRY", message: err.message, retryAfter: err.retryAfter };
  }
  const message = err instanceof Error ? err.message || err.name : String(err);
  return { outcome: "RETRY", message, retryAfter: 0 };
}
