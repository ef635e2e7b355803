/**
 * Paging a List over several clusters (pure: no I/O). A page is stitched from the clusters'
 * journal pages in config order; the `next_token` holds every cluster's own position, so a
 * cluster that did not answer keeps its place and the next page asks it again: no token ever
 * skips a cluster's entries (docs/controller.md, "Several clusters").
 *
 * Token: `<fingerprint>.<item>,<item>…`, at most 128 bytes (a CSI string). The fingerprint (6
 * base64url characters of a hash of the cluster list) ties the token to the clusters it was
 * made for: after a change of the clusters file it is ABORTED (the CO starts over). The items
 * name the clusters not done yet, by index in increasing order:
 *   `3`            cluster 3 from its start;
 *   `3-5`          clusters 3, 4 and 5 from their start;
 *   `3~<22 chars>` cluster 3 after that uuid (its 16 bytes in base64url).
 * A cluster not named is done. No clusters left: the empty token.
 */
import { createHash } from "node:crypto";
import { CSI_STRING_MAX_BYTES, DriverError, isUuid, quote, takeWithin } from "@csi/contracts";

/** One cluster's place: `null` = done, `""` = not started, else the journal token (a uuid) to resume after. */
export type Position = string | null;
export type Cursor = Position[];

const FINGERPRINT_CHARS = 6;

/** Ties a token to the cluster list (ids in order) it was made for. */
export function fingerprint(over: readonly string[]): string {
  return createHash("sha256").update(over.join("\n")).digest("base64url").slice(0, FINGERPRINT_CHARS);
}

const invalid = (token: string) => new DriverError("Aborted", `invalid starting_token ${quote(token)}`);

const uuidToShort = (u: string) => Buffer.from(u.replaceAll("-", ""), "hex").toString("base64url");
function shortToUuid(s: string): string | undefined {
  if (!/^[A-Za-z0-9_-]{22}$/.test(s)) return undefined;
  const hex = Buffer.from(s, "base64url").toString("hex");
  const u = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  return isUuid(u) && uuidToShort(u) === s ? u : undefined;
}

/** Every cluster from its start (an empty starting_token). */
export const startCursor = (over: readonly string[]): Cursor => over.map(() => "");

/** The token for `cursor` over `over`; "" when every cluster is done. */
export function encodeCursor(over: readonly string[], cursor: Cursor): string {
  const items: string[] = [];
  for (let i = 0; i < cursor.length; i++) {
    const p = cursor[i];
    if (p === null || p === undefined) continue;
    if (p !== "") {
      if (!isUuid(p)) throw new DriverError("Internal", `a journal page token is not a uuid: ${quote(p)}`);
      items.push(`${i}~${uuidToShort(p)}`);
      continue;
    }
    let j = i;
    while (cursor[j + 1] === "") j++;
    items.push(j > i ? `${i}-${j}` : `${i}`);
    i = j;
  }
  if (!items.length) return "";
  const token = `${fingerprint(over)}.${items.join(",")}`;
  // Only reached when several clusters failed part-way through one listing: better a retry than a token past CSI's limit.
  if (token.length > CSI_STRING_MAX_BYTES)
    throw new DriverError("Unavailable", "too many clusters stopped answering part-way through this list to hand out a next_token; retry the List");
  return token;
}

/** The positions a starting_token holds (every cluster at its start for ""); a token not made by encodeCursor over `over` is ABORTED. */
export function decodeCursor(token: string, over: readonly string[]): Cursor {
  if (!token) return startCursor(over);
  const dot = token.indexOf(".");
  if (dot < 0 || token.slice(0, dot) !== fingerprint(over)) throw invalid(token);
  const cursor: Cursor = over.map(() => null);
  let next = 0; // items come in increasing index order, without overlaps
  for (const item of token.slice(dot + 1).split(",")) {
    const m = /^(0|[1-9][0-9]{0,5})(?:-(0|[1-9][0-9]{0,5})|~([A-Za-z0-9_-]{22}))?$/.exec(item);
    if (!m) throw invalid(token);
    const from = Number(m[1]);
    const to = m[2] === undefined ? from : Number(m[2]);
    if (from < next || to < from || to >= over.length) throw invalid(token);
    if (m[3] !== undefined) {
      const uuid = shortToUuid(m[3]);
      if (!uuid) throw invalid(token);
      cursor[from] = uuid;
    } else {
      for (let i = from; i <= to; i++) cursor[i] = "";
    }
    next = to + 1;
  }
  // The encoder writes a run of clusters at their start as one range: accept only its own form, so one page has one token.
  if (encodeCursor(over, cursor) !== token) throw invalid(token);
  return cursor;
}

/** The clusters a page still has to ask, in order. */
export const pendingOf = (cursor: Cursor): number[] => cursor.flatMap((p, i) => (p === null ? [] : [i]));

/** An entry of a journal page, ready to be listed: `key` is the journal token that resumes after it (its uuid). */
export interface Sized<E> {
  key: string;
  entry: E;
  bytes: number;
}

export interface PageLimits {
  /** The most entries (0 = no limit). */
  max: number;
  /** The most bytes of entries (the first entry is taken whatever its size, so a page always advances). */
  maxBytes: number;
}

/** A List page being stitched: the positions as of what it holds, its entries, and the clusters that did not answer. */
export interface PageState<E> {
  cursor: Cursor;
  entries: E[];
  bytes: number;
  /** Indices of the clusters that did not answer in this call (they keep their positions). */
  missing: number[];
  /** Nothing more fits: the clusters not visited yet keep their positions. */
  full: boolean;
}

export const beginPage = <E>(cursor: Cursor): PageState<E> => ({ cursor, entries: [], bytes: 0, missing: [], full: false });

/**
 * Take what fits of cluster `i`'s journal page (asked from its position; it may hold more than
 * fits). `more` is the journal token of its next page when all of this one fitted and there is
 * room left for more.
 */
export function absorb<E>(
  state: PageState<E>,
  i: number,
  page: { entries: Sized<E>[]; nextToken?: string },
  limits: PageLimits,
): { state: PageState<E>; more?: string } {
  const room = limits.max > 0 ? limits.max - state.entries.length : page.entries.length;
  const { taken, cut } = takeWithin(page.entries.slice(0, Math.max(room, 0)), (s) => s.bytes, limits.maxBytes - state.bytes, state.entries.length === 0);
  const entries = [...state.entries, ...taken.map((s) => s.entry)];
  const bytes = state.bytes + taken.reduce((n, s) => n + s.bytes, 0);
  const cursor = [...state.cursor];
  if (cut || taken.length < page.entries.length) {
    cursor[i] = taken.at(-1)?.key ?? (state.cursor[i] as string);
    return { state: { ...state, cursor, entries, bytes, full: true } };
  }
  cursor[i] = page.nextToken ?? null;
  const full = limits.max > 0 && entries.length >= limits.max;
  const next = { ...state, cursor, entries, bytes, full };
  return page.nextToken && !full ? { state: next, more: page.nextToken } : { state: next };
}

/** Cluster `i` did not answer: it keeps its position (the next page asks it again). */
export const miss = <E>(state: PageState<E>, i: number): PageState<E> => ({ ...state, missing: [...state.missing, i] });

/**
 * The answer of a page: its entries and the token of the rest (which names every cluster that did
 * not answer). A page that holds nothing while clusters did not answer is Unavailable — the
 * caller retries with the same token — so a listing never ends, nor loops on empty pages, while
 * a cluster is missing.
 */
export function finishPage<E>(over: readonly string[], state: PageState<E>): { entries: E[]; next_token: string } {
  if (state.entries.length === 0 && state.missing.length > 0) {
    const names = state.missing.map((i) => over[i]).join(", ");
    throw new DriverError("Unavailable", `cluster ${names} did not answer and nothing else is left to list: retry with the same starting_token`);
  }
  return { entries: state.entries, next_token: encodeCursor(over, state.cursor) };
}
