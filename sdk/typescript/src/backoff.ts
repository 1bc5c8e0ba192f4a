/** Delays that double from min to max, with equal jitter when asked. */
export class Backoff {
  private cur = 0;
  constructor(
    private readonly min: number,
    private readonly max: number,
    private readonly jitter = false,
  ) {}

  next(): number {
    this.cur = this.cur === 0 ? this.min : Math.min(this.cur * 2, this.max);
    if (!this.jitter) {
      return this.cur;
    }
    const half = this.cur / 2;
    return half + Math.random() * half;
  }

  reset(): void {
    this.cur = 0;
  }
}

/** Waits ms, or until signal aborts; true when the full delay passed. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(false);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A promise resolved when signal aborts. */
export function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
    } else {
      signal.addEventListener("abort", () => resolve(), { once: true });
    }
  });
}
