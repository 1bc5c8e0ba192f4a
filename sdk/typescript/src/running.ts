/**
 * The attempts a worker holds, from assignment until the handler returns:
 * their leases (renewed by heartbeats), their stop signals and their
 * quiesce flags (which hold checkpoints).
 */

/** One attempt of one job: the gateway's fence. */
export interface JobKey {
  id: string;
  attempt: number;
}

export const keyString = (k: JobKey): string => `${k.id}#${k.attempt}`;

interface RunningJob {
  key: JobKey;
  topic: string;
  abort: AbortController;
  /** The gateway's lease expiry (epoch ms), as last reported. */
  leaseUntil: number;
  /** Local monotonic time (performance.now) of the last confirmed lease. */
  renewedAt: number;
  /** Lease given up: stopped, no longer heartbeated. */
  given: boolean;
  quiesced: boolean;
}

export class RunningJobs {
  private readonly jobs = new Map<string, RunningJob>();
  private quiescedScopes = new Set<string>();
  private changeWaiters: (() => void)[] = [];

  /** Records a new attempt; false when it is already held (the gateway sent it twice). */
  add(key: JobKey, topic: string, abort: AbortController, leaseUntil: number, now: number): boolean {
    const k = keyString(key);
    if (this.jobs.has(k)) {
      return false;
    }
    this.jobs.set(k, {
      key, topic, abort, leaseUntil, renewedAt: now, given: false,
      quiesced: this.quiescedScopes.has("*") || this.quiescedScopes.has(topic),
    });
    return true;
  }

  lease(key: JobKey): { leaseUntil: number; renewedAt: number } | undefined {
    const j = this.jobs.get(keyString(key));
    return j && !j.given ? { leaseUntil: j.leaseUntil, renewedAt: j.renewedAt } : undefined;
  }

  remove(key: JobKey): void {
    this.jobs.delete(keyString(key));
  }

  /** The attempts whose leases are still worth renewing. */
  refs(): JobKey[] {
    const out: JobKey[] = [];
    for (const j of this.jobs.values()) {
      if (!j.given) {
        out.push(j.key);
      }
    }
    return out;
  }

  renewed(key: JobKey, leaseUntil: number, at: number): void {
    const j = this.jobs.get(keyString(key));
    if (j && !j.given) {
      j.leaseUntil = leaseUntil;
      j.renewedAt = at;
    }
  }

  /** Stops the attempt's handler with reason and stops renewing it; true if it was held and not given up. */
  giveUp(key: JobKey, reason: Error): boolean {
    const j = this.jobs.get(keyString(key));
    if (!j || j.given) {
      return false;
    }
    j.given = true;
    j.abort.abort(reason);
    return true;
  }

  /** Gives up, with reason, every attempt last confirmed more than ttl ago. */
  giveUpStale(now: number, ttl: number, reason: () => Error): JobKey[] {
    const out: JobKey[] = [];
    for (const j of this.jobs.values()) {
      if (!j.given && now - j.renewedAt > ttl) {
        j.given = true;
        j.abort.abort(reason());
        out.push(j.key);
      }
    }
    return out;
  }

  /** Stops every held attempt with reason; returns how many there were. */
  cancelAll(reason: () => Error): number {
    for (const j of this.jobs.values()) {
      j.abort.abort(reason());
    }
    return this.jobs.size;
  }

  get size(): number {
    return this.jobs.size;
  }

  quiesced(key: JobKey): boolean {
    return this.jobs.get(keyString(key))?.quiesced ?? false;
  }

  /** Records what the gateway said about the attempt's scope. */
  setQuiesced(key: JobKey, quiesced: boolean): void {
    const j = this.jobs.get(keyString(key));
    if (j && j.quiesced !== quiesced) {
      j.quiesced = quiesced;
      this.notify();
    }
  }

  /** Sets every held attempt's flag from a pause state's quiesced scopes, and keeps them for later arrivals. */
  applyQuiesce(scopes: Set<string>): void {
    this.quiescedScopes = scopes;
    let changed = false;
    for (const j of this.jobs.values()) {
      const q = scopes.has("*") || scopes.has(j.topic);
      if (j.quiesced !== q) {
        j.quiesced = q;
        changed = true;
      }
    }
    if (changed) {
      this.notify();
    }
  }

  /** Resolves at the next change of any attempt's quiesce flag. */
  changed(): Promise<void> {
    return new Promise((resolve) => this.changeWaiters.push(resolve));
  }

  private notify(): void {
    const waiters = this.changeWaiters;
    this.changeWaiters = [];
    for (const w of waiters) {
      w();
    }
  }
}

/**
 * Counts the jobs the worker holds and the slots freed since the gateway
 * was last told, so every freed slot reaches the gateway exactly once:
 * as a Credit on the stream, or folded into the next stream's in_flight.
 */
export class SlotLedger {
  private held = 0;
  private unsent = 0;
  /** Called when a slot is freed (the credit sender wakes). */
  onFreed: () => void = () => {};

  /** Resets unsent credits for a new stream; returns the jobs still held (in_flight). */
  opened(): number {
    this.unsent = 0;
    return this.held;
  }

  assigned(): number {
    return ++this.held;
  }

  finished(): void {
    this.held--;
    this.unsent++;
    this.onFreed();
  }

  takeUnsent(): number {
    const n = this.unsent;
    this.unsent = 0;
    return n;
  }
}
