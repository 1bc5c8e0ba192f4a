/** A structured logger: a message and attributes. */
export interface Logger {
  debug(msg: string, attrs?: Record<string, unknown>): void;
  info(msg: string, attrs?: Record<string, unknown>): void;
  warn(msg: string, attrs?: Record<string, unknown>): void;
  error(msg: string, attrs?: Record<string, unknown>): void;
}

type Level = "debug" | "info" | "warn" | "error";
const order: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** JSON lines on stderr from level up ({"time","level","msg",...attrs}), like the Go SDK's slog JSON. */
export function jsonLogger(level: Level = "info", base: Record<string, unknown> = {}): Logger {
  const write = (l: Level) => (msg: string, attrs?: Record<string, unknown>) => {
    if (order[l] < order[level]) {
      return;
    }
    const line = { time: new Date().toISOString(), level: l.toUpperCase(), msg, ...base, ...attrs };
    process.stderr.write(JSON.stringify(line, (_k, v) => (v instanceof Error ? v.message : typeof v === "bigint" ? v.toString() : v)) + "\n");
  };
  return { debug: write("debug"), info: write("info"), warn: write("warn"), error: write("error") };
}

/** A logger that drops everything. */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/** Adds attributes to every line of l. */
export function withAttrs(l: Logger, attrs: Record<string, unknown>): Logger {
  return {
    debug: (m, a) => l.debug(m, { ...attrs, ...a }),
    info: (m, a) => l.info(m, { ...attrs, ...a }),
    warn: (m, a) => l.warn(m, { ...attrs, ...a }),
    error: (m, a) => l.error(m, { ...attrs, ...a }),
  };
}
