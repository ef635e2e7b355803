import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError } from "@csi/contracts";
import { absorb, beginPage, type Cursor, decodeCursor, encodeCursor, fingerprint, finishPage, miss, type Sized, startCursor } from "./paging.js";

const U1 = "00000000-0000-4000-8000-000000000001";
const U2 = "ffffffff-ffff-4fff-bfff-fffffffffff2";
const OVER = ["a", "b", "c", "d"];
const codeOf = (f: () => unknown) => {
  try {
    f();
    return "OK";
  } catch (e) {
    return e instanceof DriverError ? e.code : String(e);
  }
};

describe("token codec", () => {
  const cases: [string, Cursor][] = [
    ["all from their start", ["", "", "", ""]],
    ["one cluster part-way, the rest from their start", [null, U1, "", ""]],
    ["a cluster that did not answer kept at its start before one part-way", ["", null, U2, null]],
    ["several part-way", [U1, null, U2, ""]],
    ["only the last", [null, null, null, ""]],
  ];
  for (const [what, cursor] of cases) {
    test(`round trip: ${what}`, () => {
      const token = encodeCursor(OVER, cursor);
      assert.ok(token.length <= 128, token);
      assert.match(token, /^[A-Za-z0-9_.,~-]+$/);
      assert.deepEqual(decodeCursor(token, OVER), cursor);
    });
  }

  test("every cluster done is the empty token, and the empty token starts every cluster", () => {
    assert.equal(encodeCursor(OVER, [null, null, null, null]), "");
    assert.deepEqual(decodeCursor("", OVER), startCursor(OVER));
  });

  test("a run of clusters at their start is one range; the token stays short", () => {
    const over = Array.from({ length: 64 }, (_, i) => `cluster-${i}-${"x".repeat(50)}`);
    const cursor: Cursor = over.map((_, i) => (i < 10 ? null : i === 10 ? U1 : ""));
    const token = encodeCursor(over, cursor);
    assert.equal(token, `${fingerprint(over)}.10~AAAAAAAAQACAAAAAAAAAAQ,11-63`);
    assert.deepEqual(decodeCursor(token, over), cursor);
  });

  test("a token too long for CSI (many clusters failed part-way) is UNAVAILABLE, not a token past 128 bytes", () => {
    const over = ["a", "b", "c", "d", "e", "f"];
    assert.equal(
      codeOf(() =>
        encodeCursor(
          over,
          over.map(() => U1),
        ),
      ),
      "Unavailable",
    );
  });

  test("anything the encoder did not write, or wrote for other clusters, is ABORTED", () => {
    const good = encodeCursor(OVER, [null, U1, "", ""]);
    const fp = fingerprint(OVER);
    for (const bad of [
      "garbage",
      "c1/",
      `c1/${U1}`,
      good.replace(fp, fingerprint(["a", "b", "c"])), // made for another clusters file
      `${fp}.`,
      `${fp}.4`, // index past the clusters
      `${fp}.2,1`, // out of order
      `${fp}.1,1`, // twice
      `${fp}.1-1`, // not the encoder's form
      `${fp}.1,2`, // a run written item by item
      `${fp}.2-1`,
      `${fp}.01`,
      `${fp}.1~AAAA`, // short uuid
      `${fp}.1~${"_".repeat(22)}`, // not a uuid (version/variant bits)
      `${fp}.1~${U1}`, // the long form
      `${good}\0`,
    ]) {
      assert.equal(
        codeOf(() => decodeCursor(bad, OVER)),
        "Aborted",
        bad,
      );
    }
  });

  test("a journal token that is not a uuid is an internal error, never a broken token", () => {
    assert.equal(
      codeOf(() => encodeCursor(OVER, ["nope", "", "", ""])),
      "Internal",
    );
  });
});

const sized = (uuids: string[]): Sized<string>[] => uuids.map((u) => ({ key: u, entry: u, bytes: 10 }));
const uuid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`;

describe("stitching a page", () => {
  test("given a page that fits whole with a next page, when absorbed, then the cluster moves on and asks for more", () => {
    const { state, more } = absorb(
      beginPage(startCursor(["a", "b"])),
      0,
      { entries: sized([uuid(1), uuid(2)]), nextToken: uuid(3) },
      { max: 0, maxBytes: 1000 },
    );
    assert.deepEqual(state.entries, [uuid(1), uuid(2)]);
    assert.deepEqual(state.cursor, [uuid(3), ""]);
    assert.equal(more, uuid(3));
    assert.equal(state.full, false);
  });

  test("given more entries than max_entries leaves room for, then the cluster stays at the last one taken", () => {
    const s0 = absorb(beginPage(startCursor(["a", "b"])), 0, { entries: sized([uuid(1)]) }, { max: 3, maxBytes: 1000 }).state;
    assert.deepEqual(s0.cursor, [null, ""], "a is done");
    const { state, more } = absorb(s0, 1, { entries: sized([uuid(5), uuid(6), uuid(7)]), nextToken: uuid(7) }, { max: 3, maxBytes: 1000 });
    assert.deepEqual(state.entries, [uuid(1), uuid(5), uuid(6)]);
    assert.deepEqual(state.cursor, [null, uuid(6)]);
    assert.equal(state.full, true);
    assert.equal(more, undefined);
    assert.equal(decodeCursor(finishPage(["a", "b"], state).next_token, ["a", "b"])[1], uuid(6));
  });

  test("given the byte budget runs out, then the cut is at the last entry that fitted; the first entry always fits", () => {
    const { state } = absorb(beginPage(startCursor(["a"])), 0, { entries: sized([uuid(1), uuid(2), uuid(3)]) }, { max: 0, maxBytes: 25 });
    assert.deepEqual(state.entries, [uuid(1), uuid(2)]);
    assert.deepEqual(state.cursor, [uuid(2)]);
    const huge = absorb(beginPage(startCursor(["a"])), 0, { entries: sized([uuid(1)]).map((s) => ({ ...s, bytes: 1e9 })) }, { max: 0, maxBytes: 25 });
    assert.deepEqual(huge.state.entries, [uuid(1)]);
  });

  test("given nothing of a page fits after earlier entries, then the cluster keeps its old position", () => {
    const s0 = absorb(beginPage<string>([uuid(9), ""]), 0, { entries: sized([uuid(10)]) }, { max: 0, maxBytes: 15 }).state;
    const { state } = absorb(s0, 1, { entries: sized([uuid(20)]) }, { max: 0, maxBytes: 15 });
    assert.deepEqual(state.cursor, [null, ""]);
    assert.equal(state.full, true);
  });

  test("given a cluster that did not answer, then the page names it in its token", () => {
    const s = miss(beginPage<string>(startCursor(["a", "b"])), 0);
    const { state } = absorb(s, 1, { entries: sized([uuid(1)]) }, { max: 0, maxBytes: 1000 });
    const page = finishPage(["a", "b"], state);
    assert.deepEqual(page.entries, [uuid(1)]);
    assert.deepEqual(decodeCursor(page.next_token, ["a", "b"]), ["", null], "a is asked again from its start; b is done");
  });

  test("given nothing but clusters that did not answer, then the page is UNAVAILABLE (never an empty page that ends or loops)", () => {
    const s = miss(absorb(beginPage<string>(startCursor(["a", "b"])), 0, { entries: [] }, { max: 0, maxBytes: 1000 }).state, 1);
    assert.equal(
      codeOf(() => finishPage(["a", "b"], s)),
      "Unavailable",
    );
  });

  test("given every cluster answered to its end, then the token is empty", () => {
    let s = beginPage<string>(startCursor(["a", "b"]));
    s = absorb(s, 0, { entries: sized([uuid(1)]) }, { max: 0, maxBytes: 1000 }).state;
    s = absorb(s, 1, { entries: [] }, { max: 0, maxBytes: 1000 }).state;
    assert.deepEqual(finishPage(["a", "b"], s), { entries: [uuid(1)], next_token: "" });
  });
});
