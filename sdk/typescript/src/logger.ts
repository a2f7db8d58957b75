// The logger a handler writes to: any object with these four methods (the
// console, pino, winston...). The default writes a JSON line per entry to
// standard error.

export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

type Level = "debug" | "info" | "warn" | "error";
const levels: Level[] = ["debug", "info", "warn", "error"];

/** A logger that writes JSON lines to stderr at `level` and above ("info" by default, $TETHER_LOG_LEVEL). */
export function stderrLogger(level: Level = (process.env.TETHER_LOG_LEVEL as Level) || "info"): Logger {
  const min = Math.max(0, levels.indexOf(level));
  const write = (l: Level) => (message: string, fields?: Record<string, unknown>) => {
    if (levels.indexOf(l) < min) return;
    const line = { time: new Date().toISOString(), level: l, message, ...fields };
    process.stderr.write(JSON.stringify(line, errorsAsText) + "\n");
  };
  return { debug: write("debug"), info: write("info"), warn: write("warn"), error: write("error") };
}

/** A logger that adds `fields` to every entry of `log`. */
export function withFields(log: Logger, fields: Record<string, unknown>): Logger {
  return {
    debug: (m, f) => log.debug(m, { ...fields, ...f }),
    info: (m, f) => log.info(m, { ...fields, ...f }),
    warn: (m, f) => log.warn(m, { ...fields, ...f }),
    error: (m, f) => log.error(m, { ...fields, ...f }),
  };
}

function errorsAsText(_key: string, value: unknown): unknown {
  return value instanceof Error ? value.message : value;
}
