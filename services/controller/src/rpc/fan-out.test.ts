/**
 * listAcross over clusters held in memory (each a sorted list of uuids paged the way the journal
 * pages its index): every max_entries walks every entry exactly once, in config order; a cluster
 * that fails keeps its place, so a listing never ends without it; the answers no longer needed
 * are cancelled. The real thing (journals over NATS, gRPC) is test/multi-cluster.test.ts.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { type JournalPage, listAcross } from "./fan-out.js";

const uuid = (cluster: number, n: number) => `${String(cluster).padStart(8, "0")}-0000-4000-8000-${String(n).padStart(12, "0")}`;
type V = { uuid: string };

/** Clusters of `sizes[i]` entries; the journal cuts each page at `cut` entries (its max_payload stand-in). */
function clusters(sizes: number[], cut = 4) {
  const data = new Map(sizes.map((n, c) => [`c${c}`, Array.from({ length: n }, (_, i) => uuid(c, i))]));
  const down = new Set<string>();
  const asked: string[] = [];
  const aborted: string[] = [];
  const fetch = async (cluster: string, maxEntries: number, inner: string | undefined, signal: AbortSignal): Promise<JournalPage<V>> => {
    asked.push(cluster);
    if (down.has(cluster)) {
      // A silent cluster: only its bound (here: the fan-out's own cancel or a short timer) ends the wait.
      await new Promise((r) => {
        const t = setTimeout(r, 20);
        signal.addEventListener("abort", () => {
          clearTimeout(t);
          aborted.push(cluster);
          r(undefined);
        });
      });
      throw new DriverError("Unavailable", `cluster ${cluster} is down`);
    }
    const all = data.get(cluster) ?? [];
    const from = inner === undefined ? 0 : all.findIndex((u) => u > inner);
    const rest = from < 0 ? [] : all.slice(from);
    const n = Math.min(maxEntries > 0 ? maxEntries : cut, cut);
    const entries = rest.slice(0, n).map((u) => ({ uuid: u }));
    return rest.length > n ? { entries, nextToken: (entries.at(-1) as V).uuid } : { entries };
  };
  const over = sizes.map((_, c) => `c${c}`);
  const everything = over.flatMap((c) => data.get(c) ?? []);
  const missing: string[] = [];
  const page = (token: string, max: number, maxBytes = 1 << 20) =>
    listAcross({
      over,
      token,
      max,
      maxBytes,
      fetch,
      toEntry: (_c, v: V) => v.uuid,
      signal: new AbortController().signal,
      onMissing: (c) => missing.push(c),
    });
  return { over, down, asked, aborted, missing, everything, page };
}

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => "OK",
    (e: unknown) => (e instanceof DriverError ? e.code : String(e)),
  );

/** Walk every page; a page that fails is tried again (up to `retries` times) after `onFail`. */
async function walk(c: ReturnType<typeof clusters>, max: number, onFail: (n: number) => void = () => {}, retries = 0) {
  const seen: string[] = [];
  let token = "";
  let fails = 0;
  for (let pages = 0; pages < 1000; pages++) {
    let res: { entries: string[]; next_token: string };
    try {
      res = await c.page(token, max);
    } catch (e) {
      if (++fails > retries) throw e;
      onFail(fails);
      continue;
    }
    if (max > 0) assert.ok(res.entries.length <= max, `page of ${res.entries.length} > ${max}`);
    seen.push(...res.entries);
    token = res.next_token;
    if (!token) return seen;
  }
  throw new Error("no end");
}

describe("listAcross", () => {
  test("every max_entries (0 and 1…12) lists every entry of every cluster once, in config order", async () => {
    for (const sizes of [[5, 0, 7], [0, 0, 3], [9], [0, 0]]) {
      for (let max = 0; max <= 12; max++) {
        const c = clusters(sizes);
        assert.deepEqual(await walk(c, max), c.everything, `sizes ${sizes} max ${max}`);
      }
    }
  });

  test("the byte budget cuts pages and the walk still lists everything once", async () => {
    const c = clusters([6, 6]);
    const seen: string[] = [];
    let token = "";
    do {
      const res = await c.page(token, 0, 36 * 3); // three JSON uuids a page
      assert.ok(res.entries.length <= 3);
      seen.push(...res.entries);
      token = res.next_token;
    } while (token);
    assert.deepEqual(seen, c.everything);
  });

  test("a cluster that is down keeps its place: the walk never ends without it, and completes once it is back", async () => {
    for (const downOne of ["c0", "c1", "c2"]) {
      for (const max of [0, 1, 2, 5]) {
        const c = clusters([5, 3, 6]);
        c.down.add(downOne);
        // While it is down, a walk ends in UNAVAILABLE (once nothing else is left), never with an empty token.
        assert.equal(await codeOf(walk(c, max)), "Unavailable", `${downOne} down, max ${max}`);
        // It comes back after the first failure: the same walk, retried from the token it had, completes — each entry once.
        const c2 = clusters([5, 3, 6]);
        c2.down.add(downOne);
        const seen = await walk(c2, max, () => c2.down.clear(), 1);
        assert.deepEqual([...seen].sort(), [...c2.everything].sort(), `${downOne} down then up, max ${max}`);
        assert.equal(new Set(seen).size, seen.length, "no entry twice");
        assert.ok(c2.missing.includes(downOne));
      }
    }
  });

  test("an unpaged List with a cluster down answers the others at once, with a token that leads to the missing one", async () => {
    const c = clusters([3, 4]);
    c.down.add("c0");
    const first = await c.page("", 0);
    assert.deepEqual(first.entries, c.everything.slice(3), "c1's entries");
    assert.ok(first.next_token, "a token: the list is not complete");
    assert.equal(await codeOf(c.page(first.next_token, 0)), "Unavailable", "only the missing cluster is left");
    c.down.clear();
    const rest = await c.page(first.next_token, 0);
    assert.deepEqual(rest, { entries: c.everything.slice(0, 3), next_token: "" });
  });

  test("once the page is full, the answers not needed any more are cancelled", async () => {
    const c = clusters([3, 4]);
    c.down.add("c1"); // silent: would hold the page until its bound
    const res = await c.page("", 2);
    assert.deepEqual(res.entries, c.everything.slice(0, 2));
    assert.deepEqual(c.aborted, ["c1"]);
    assert.deepEqual(c.missing, [], "not needed, so not missing");
  });
});
