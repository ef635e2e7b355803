/**
 * What the journal takes of a node's device reports (docs/security.md, "Node work and reports"):
 * only reports on a volume the node has business with — it holds a claim on it, or its own reports
 * say it still holds something of it (a staging, a target, a device: it is cleaning up) — and no
 * more than a rate with a burst per node, so that one node cannot flood a cluster's log. Pure.
 */
import type { DeviceHold } from "./devices.js";

/** Why a node's report on a volume is not its business, or undefined when it is. */
export function whyNotNodesBusiness(nodeId: string, claims: readonly { nodeId: string }[] | undefined, holds: readonly DeviceHold[]): string | undefined {
  if (claims?.some((c) => c.nodeId === nodeId)) return undefined;
  if (holds.some((h) => h.nodeId === nodeId)) return undefined;
  return claims === undefined ? "no such volume in this cluster" : "the node holds no claim on it and nothing of it";
}

/** A token bucket per key: `rate` tokens a second, at most `burst`; each take costs one. */
export class TokenBuckets {
  readonly #buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly rate: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
    /** Keys kept at most (the oldest forgotten first: a forgotten key starts full again). */
    private readonly maxKeys = 10_000,
  ) {}

  /** Whether `key` may have one more now. */
  take(key: string): boolean {
    const t = this.now();
    const b = this.#buckets.get(key) ?? { tokens: this.burst, at: t };
    b.tokens = Math.min(this.burst, b.tokens + ((t - b.at) / 1000) * this.rate);
    b.at = t;
    this.#buckets.delete(key);
    this.#buckets.set(key, b);
    if (this.#buckets.size > this.maxKeys) this.#buckets.delete(this.#buckets.keys().next().value as string);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }
}
