/**
 * Calls sent ahead of their answers, at most `depth` at once, their answers taken in the order
 * they were sent (a catch-up's batches, a rebuild's chunks: each conditional on the one before).
 *
 * Every call is awaited, whatever happens: when one fails, the caller stops and throws, and the
 * calls still out would otherwise reject with nobody waiting — an unhandled rejection, which ends
 * a Node process (two journals died so when Redis failed over during a catch-up: issue 24).
 * So each call is marked handled as it is sent, and `settle` (in the caller's `finally`) waits
 * for the rest, so nothing is left running when the caller returns.
 */
export class SentAhead<T> {
  readonly #out: Promise<T>[] = [];

  constructor(private readonly depth: number) {
    if (!Number.isSafeInteger(depth) || depth < 1) throw new RangeError(`depth must be an integer ≥ 1, got ${depth}`);
  }

  /** How many calls are out. */
  get size(): number {
    return this.#out.length;
  }

  /** Sends `call` on its way; once `depth` are out, waits for the oldest: its answer (its failure thrown), else undefined. */
  async add(call: Promise<T>): Promise<T | undefined> {
    call.catch(() => {}); // awaited by add, rest or settle: never unhandled
    this.#out.push(call);
    return this.#out.length >= this.depth ? this.#out.shift() : undefined;
  }

  /** The answers of every call still out, in the order sent (the first failure thrown: `settle` then waits for the others). */
  async rest(): Promise<T[]> {
    const answers: T[] = [];
    for (let call = this.#out.shift(); call; call = this.#out.shift()) answers.push(await call);
    return answers;
  }

  /** Waits for every call still out, whatever each answers (after a failure). */
  async settle(): Promise<void> {
    await Promise.allSettled(this.#out.splice(0));
  }
}
