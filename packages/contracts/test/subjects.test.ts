import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError } from "../src/errors.js";
import { CLUSTER_ID_RE, clusterToken, nameToken, SubjectError, subjects, token } from "../src/subjects.js";

const UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

/** What a NATS subject token may not contain. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what we look for
const UNSAFE = /[.*>\s\u0000-\u001f\u007f]/u;

function assertSubjectError(fn: () => unknown, label: string): void {
  assert.throws(
    fn,
    (e: unknown) => {
      assert.ok(e instanceof SubjectError, `${label}: expected SubjectError, got ${String(e)}`);
      assert.ok(e instanceof DriverError, `${label}: SubjectError must be a DriverError`);
      assert.equal(e.code, "InvalidArgument", label);
      assert.match(e.message, /for a subject token/, label);
      return true;
    },
    label,
  );
}

describe("subjects: command subjects", () => {
  const table: Array<[string, string, string]> = [
    ["c1", "volume.create", "csi.c1.journal.volume.create"],
    ["c1", "volume.delete", "csi.c1.journal.volume.delete"],
    ["c1", "volume.expand", "csi.c1.journal.volume.expand"],
    ["c1", "volume.get", "csi.c1.journal.volume.get"],
    ["c1", "volume.list", "csi.c1.journal.volume.list"],
    ["local", "snapshot.create", "csi.local.journal.snapshot.create"],
    ["local", "snapshot.list", "csi.local.journal.snapshot.list"],
    ["A-b_9", "pool.stat", "csi.A-b_9.journal.pool.stat"],
  ];
  for (const [cluster, command, want] of table) {
    test(`command(${cluster}, ${command})`, () => {
      assert.equal(subjects.command(cluster, command), want);
    });
  }

  const bad: Array<[string, string, string]> = [
    ["empty verb", "c1", "volume."],
    ["empty family", "c1", ".create"],
    ["empty command", "c1", ""],
    ["double dot", "c1", "volume..create"],
    ["star", "c1", "volume.*"],
    ["gt", "c1", "volume.>"],
    ["space", "c1", "volume.cre ate"],
    ["tab", "c1", "volume.\tcreate"],
    ["newline", "c1", "volume.create\n"],
    ["bad cluster with dot", "c.1", "volume.create"],
    ["bad cluster empty", "", "volume.create"],
    ["bad cluster wildcard", "*", "volume.create"],
    ["bad cluster gt", ">", "volume.create"],
  ];
  for (const [label, cluster, command] of bad) {
    test(`command rejects ${label}`, () => {
      assertSubjectError(() => subjects.command(cluster, command), label);
    });
  }
});

describe("subjects: event and stream subjects", () => {
  test("per-aggregate event subjects", () => {
    assert.equal(subjects.volumeEvents("c1", UUID), `csi.c1.evt.vol.${UUID}`);
    assert.equal(subjects.snapshotEvents("c1", UUID), `csi.c1.evt.snap.${UUID}`);
    assert.equal(subjects.deviceEvents("c1", UUID), `csi.c1.evt.dev.${UUID}`);
  });

  test("wildcards", () => {
    assert.equal(subjects.commandWildcard("c1"), "csi.c1.journal.>");
    assert.equal(subjects.eventsWildcard("c1"), "csi.c1.evt.>");
  });

  test("stream, queue and service names", () => {
    assert.equal(subjects.streamName("c1"), "CSI_EVENTS_c1");
    assert.equal(subjects.journalQueue("c1"), "journal-c1");
    assert.equal(subjects.journalServiceName("c1"), "csi-journal-c1");
  });

  const names = ["pvc-1", "a.b >*", "a.b", "", " ", "名字", "x".repeat(128), "\u0000\n\t"];
  for (const kind of ["vol", "snap"] as const) {
    for (const name of names) {
      test(`nameEvents(${kind}, ${JSON.stringify(name).slice(0, 24)}) has exactly 7 tokens`, () => {
        const s = subjects.nameEvents("c1", kind, "default", name);
        assert.equal(s, `csi.c1.evt.name.${kind}.default.${nameToken(name)}`);
        const parts = s.split(".");
        assert.equal(parts.length, 7);
        for (const p of parts) {
          assert.ok(p.length > 0, `empty token in ${s}`);
          assert.doesNotMatch(p, UNSAFE, `unsafe token ${JSON.stringify(p)} in ${s}`);
        }
      });
    }
  }

  const badUuidTokens = ["", "a.b", "*", ">", "a b", "x\n"];
  for (const u of badUuidTokens) {
    test(`event subjects reject uuid token ${JSON.stringify(u)}`, () => {
      assertSubjectError(() => subjects.volumeEvents("c1", u), "volumeEvents");
      assertSubjectError(() => subjects.snapshotEvents("c1", u), "snapshotEvents");
      assertSubjectError(() => subjects.deviceEvents("c1", u), "deviceEvents");
    });
  }

  test("nameEvents rejects a bad instance token", () => {
    assertSubjectError(() => subjects.nameEvents("c1", "vol", "a.b", "n"), "instance a.b");
    assertSubjectError(() => subjects.nameEvents("c1", "vol", "", "n"), "empty instance");
  });

  test("every builder rejects a bad cluster id", () => {
    const bad = "bad.cluster";
    assertSubjectError(() => subjects.commandWildcard(bad), "commandWildcard");
    assertSubjectError(() => subjects.eventsWildcard(bad), "eventsWildcard");
    assertSubjectError(() => subjects.volumeEvents(bad, UUID), "volumeEvents");
    assertSubjectError(() => subjects.snapshotEvents(bad, UUID), "snapshotEvents");
    assertSubjectError(() => subjects.deviceEvents(bad, UUID), "deviceEvents");
    assertSubjectError(() => subjects.nameEvents(bad, "vol", "default", "n"), "nameEvents");
    assertSubjectError(() => subjects.streamName(bad), "streamName");
    assertSubjectError(() => subjects.journalQueue(bad), "journalQueue");
    assertSubjectError(() => subjects.journalServiceName(bad), "journalServiceName");
  });
});

describe("token()", () => {
  const good = ["a", "volume", "create", UUID, "A-b_c", "名字", "x".repeat(300), "a,b", "a:b", "a/b"];
  for (const t of good) {
    test(`accepts ${JSON.stringify(t).slice(0, 30)}`, () => {
      assert.equal(token(t), t);
    });
  }

  const bad: Array<[string, string]> = [
    ["empty", ""],
    ["dot", "."],
    ["dot inside", "a.b"],
    ["star", "*"],
    ["star inside", "a*"],
    ["gt", ">"],
    ["gt inside", "a>b"],
    ["space", " "],
    ["space inside", "a b"],
    ["tab", "\t"],
    ["newline", "\n"],
    ["carriage return", "a\rb"],
    ["NUL", "\u0000"],
    ["ESC", "a\u001bb"],
    ["unit separator", "\u001f"],
    ["DEL", "\u007f"],
    ["vertical tab", "\u000b"],
    ["form feed", "\u000c"],
    ["no-break space", "a\u00a0b"],
    ["line separator", "a\u2028b"],
    ["ideographic space", "a\u3000b"],
  ];
  for (const [label, t] of bad) {
    test(`rejects ${label}`, () => {
      assertSubjectError(() => token(t), label);
    });
  }

  test("the error names what was being checked", () => {
    assert.throws(() => token("a.b", "uuid"), /invalid uuid for a subject token: "a\.b"/);
  });
});

describe("clusterToken()", () => {
  const good = ["a", "7", "c1", "local", "A-b_c", "0bba3be9-0a1c-41db-a619-26ffea20161e", "x".repeat(64)];
  for (const c of good) {
    test(`accepts ${JSON.stringify(c)}`, () => {
      assert.equal(clusterToken(c), c);
      assert.match(c, CLUSTER_ID_RE);
    });
  }

  const bad: Array<[string, string]> = [
    ["empty", ""],
    ["65 chars", "x".repeat(65)],
    ["leading dash", "-a"],
    ["leading underscore", "_a"],
    ["dot", "a.b"],
    ["star", "a*"],
    ["gt", "a>"],
    ["space", "a b"],
    ["tab", "a\tb"],
    ["trailing newline", "a\n"],
    ["slash", "a/b"],
    ["colon", "a:b"],
    ["braces (redis hash tag)", "{a}"],
    ["non-ASCII", "clüster"],
    ["CJK", "名字"],
  ];
  for (const [label, c] of bad) {
    test(`rejects ${label}`, () => {
      assertSubjectError(() => clusterToken(c), label);
    });
  }
});

describe("nameToken()", () => {
  const names = ["pvc-0bba3be9", "a.b >*", "名字", "x".repeat(128), " ", "\t\n", ".", "*", ">", "a.b", "a>b", "🙂", "\u0000", "_", "-", ""];
  for (const name of names) {
    test(`makes ${JSON.stringify(name).slice(0, 24)} a safe token`, () => {
      const t = nameToken(name);
      assert.ok(t.length > 0);
      assert.doesNotMatch(t, UNSAFE);
      assert.match(t, /^[A-Za-z0-9_-]+$/);
      assert.equal(token(t), t);
    });
  }

  test("is base64url of the UTF-8 bytes (decodes back) for non-empty names", () => {
    for (const name of names.filter((n) => n !== "")) {
      assert.equal(Buffer.from(nameToken(name), "base64url").toString("utf8"), name);
    }
  });

  test("the empty name gets the placeholder '_'", () => {
    assert.equal(nameToken(""), "_");
  });

  test("is injective over distinct names (including look-alikes and the empty name)", () => {
    const distinct = [
      ...names,
      "a.b",
      "a_b",
      "a-b",
      "ab",
      "A.B",
      "a.b ",
      " a.b",
      "名字 ",
      "x".repeat(127),
      "x".repeat(129),
      "_ ", // not the placeholder
      "\u00ff",
    ];
    const uniq = [...new Set(distinct)];
    const tokens = new Map<string, string>();
    for (const n of uniq) {
      const t = nameToken(n);
      assert.ok(!tokens.has(t), `${JSON.stringify(n)} and ${JSON.stringify(tokens.get(t))} share token ${t}`);
      tokens.set(t, n);
    }
    assert.equal(tokens.size, uniq.length);
  });

  test("128-char name token length is base64 of 128 bytes", () => {
    assert.equal(nameToken("x".repeat(128)).length, Math.ceil((128 * 4) / 3));
  });
});
