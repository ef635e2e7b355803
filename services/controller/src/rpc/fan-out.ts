/**
 * One List page over several clusters (docs/controller.md, "Several clusters"): the first
 * journal page of every cluster the token leaves to ask is requested at once; the answers are
 * stitched in config order (domain/paging.ts) and a cluster's further pages are fetched while
 * room is left. A cluster that fails (not answering within its bound, or answering an error) is
 * reported and keeps its position in the next_token; requests no longer needed are cancelled.
 */
import { DriverError, grpcCodeOf, jsonBytes } from "@csi/contracts";
import { type CallContext, grpcCodeName } from "@csi/runtime";
import { LIST_REPLY_MAX_BYTES, maxEntriesOf } from "../domain/csi.js";
import { absorb, beginPage, decodeCursor, finishPage, miss, type PageState, pendingOf, type Sized } from "../domain/paging.js";

export type JournalPage<V> = { entries: V[]; nextToken?: string };
type Got<T> = { ok: true; value: T } | { ok: false; err: unknown };
const settle = <T>(p: Promise<T>): Promise<Got<T>> =>
  p.then(
    (value) => ({ ok: true, value }),
    (err: unknown) => ({ ok: false, err }),
  );

/** Ask every item at once; the answers and the failures, each with its item. */
export async function fromEach<T, R>(items: T[], ask: (item: T) => Promise<R>) {
  const got = await Promise.all(items.map((item) => settle(ask(item)).then((g) => ({ item, g }))));
  return {
    healthy: got.flatMap(({ item, g }) => (g.ok ? [{ item, value: g.value }] : [])),
    failed: got.flatMap(({ item, g }) => (g.ok ? [] : [{ item, err: g.err }])),
  };
}

/** How a cluster's failure is logged: its gRPC code by name ("UNAVAILABLE", as docs and metrics say it) and message (never a stack: it is the cluster's state, not a bug here). */
export const errorFields = (err: unknown) =>
  err instanceof DriverError
    ? { code: grpcCodeName(grpcCodeOf(err.code)), reason: err.message }
    : { code: "INTERNAL", reason: String((err as Error)?.message ?? err) };

export interface ListAcross<V, E> {
  /** The clusters listed, in order. */
  over: string[];
  token: string;
  /** max_entries (0 = no limit). */
  max: number;
  maxBytes: number;
  /** One journal page of a cluster, from `inner` (its start when undefined); bounded in time by the caller of listAcross. */
  fetch: (cluster: string, maxEntries: number, inner: string | undefined, signal: AbortSignal) => Promise<JournalPage<V>>;
  toEntry: (cluster: string, v: V) => E;
  /** The caller's: when it aborts, the List fails (a cluster's failure is not the caller's going away). */
  signal: AbortSignal;
  /** A cluster that failed in this call (its entries are left for the next_token). */
  onMissing: (cluster: string, err: unknown) => void;
}

export async function listAcross<V extends { uuid: string }, E>(a: ListAcross<V, E>): Promise<{ entries: E[]; next_token: string }> {
  let state: PageState<E> = beginPage(decodeCursor(a.token, a.over));
  const limits = { max: a.max, maxBytes: a.maxBytes };
  const done = new AbortController();
  const signal = AbortSignal.any([a.signal, done.signal]);
  const sized = (cluster: string, page: JournalPage<V>) => ({
    ...page,
    entries: page.entries.map((v): Sized<E> => {
      const entry = a.toEntry(cluster, v);
      return { key: v.uuid, entry, bytes: jsonBytes(entry) };
    }),
  });
  const ask = (i: number, maxEntries: number, inner: string | undefined) => settle(a.fetch(a.over[i] as string, maxEntries, inner || undefined, signal));
  const pending = pendingOf(state.cursor);
  // Every cluster is asked at once, for a whole page each: a slow or silent one costs its bound once, not once per cluster.
  const first = new Map(pending.map((i) => [i, ask(i, a.max, state.cursor[i] as string)]));
  try {
    for (const i of pending) {
      if (state.full) break;
      let got = await (first.get(i) as Promise<Got<JournalPage<V>>>);
      for (;;) {
        if (!got.ok) {
          if (a.signal.aborted) throw got.err instanceof DriverError ? got.err : new DriverError("DeadlineExceeded", "the caller cancelled");
          state = miss(state, i);
          a.onMissing(a.over[i] as string, got.err);
          break;
        }
        const step = absorb(state, i, sized(a.over[i] as string, got.value), limits);
        state = step.state;
        if (!step.more) break;
        got = await ask(i, a.max > 0 ? a.max - state.entries.length : 0, step.more);
      }
    }
  } finally {
    done.abort(); // the answers not needed any more (the page is full)
  }
  return finishPage(a.over, state);
}

/**
 * One page of a CSI List (`what`: ListVolumes, ListSnapshots) over the clusters `over`: every
 * cluster asked at once, each bounded in time by `fetch`; one that fails is logged and keeps its
 * position in the next_token.
 */
export async function listPage<V extends { uuid: string }, E>(
  what: string,
  over: string[],
  req: { starting_token?: string; max_entries?: number },
  ctx: CallContext,
  fetch: ListAcross<V, E>["fetch"],
  toEntry: ListAcross<V, E>["toEntry"],
): Promise<{ entries: E[]; next_token: string }> {
  return listAcross({
    over,
    token: String(req.starting_token ?? ""),
    max: maxEntriesOf(req.max_entries),
    maxBytes: LIST_REPLY_MAX_BYTES,
    fetch,
    toEntry,
    signal: ctx.signal,
    onMissing: (cluster, err) =>
      ctx.log.warn({ cluster, ...errorFields(err) }, `${what} answered without cluster ${cluster}: its entries are left for next_token`),
  });
}
