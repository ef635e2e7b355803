import assert from "node:assert/strict";
import path from "node:path";
import { describe, test } from "node:test";
import type { z } from "zod";
import { CSI_MAP_MAX_BYTES, CSI_NAME_MAX_BYTES, mapBytes } from "../src/bounds.js";
import { DEFAULT_CLUSTERS, resolveClusters } from "../src/clusters.js";
import { CsiName, describeZodError, StringMap } from "../src/common.js";
import { DriverError, ErrorName, fromWireError, GrpcCode, grpcCodeOf, invalidArgument, notFound, toWireError, WireError } from "../src/errors.js";
import { JournalEvent, VolumeReserved } from "../src/events.js";
import { DEFAULT_ORPHAN_AGE_MS, journalContract, replyEnvelope, VolumeCreate, VolumeDelete, VolumeExpand } from "../src/journal.js";
import { subjects } from "../src/subjects.js";

const UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

const goodCreate = {
  requestId: "req-1",
  name: "pvc-0bba3be9",
  sizeBytes: 1 << 30,
  capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER", fsType: "ext4" }],
};

/** Parse and expect failure; return the describeZodError line. */
function failMessage(schema: z.ZodTypeAny, input: unknown): string {
  const r = schema.safeParse(input);
  assert.equal(r.success, false, `expected ${JSON.stringify(input)?.slice(0, 200)} to be rejected`);
  if (r.success) throw new Error("unreachable");
  const msg = describeZodError(r.error);
  assert.equal(typeof msg, "string");
  assert.ok(msg.length > 0);
  return msg;
}

describe("VolumeCreate", () => {
  test("a good request parses and fills defaults (limitBytes 0, parameters {})", () => {
    const r = VolumeCreate.safeParse(goodCreate);
    assert.ok(r.success, r.success ? "" : describeZodError(r.error));
    assert.deepEqual(r.data, {
      requestId: "req-1",
      name: "pvc-0bba3be9",
      sizeBytes: 1 << 30,
      limitBytes: 0,
      parameters: {},
      capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER", fsType: "ext4" }],
    });
  });

  test("explicit optional fields are kept", () => {
    const input = {
      ...goodCreate,
      limitBytes: 2 * 2 ** 30,
      pool: "fast",
      parameters: { a: "b" },
      source: { kind: "snapshot", uuid: UUID },
      capabilities: [{ accessType: "block", accessMode: "MULTI_NODE_MULTI_WRITER" }],
    };
    assert.deepEqual(VolumeCreate.parse(input), input);
  });

  test("a name of exactly 128 bytes (multi-byte chars) is accepted", () => {
    const name = "é".repeat(64);
    assert.equal(Buffer.byteLength(name), CSI_NAME_MAX_BYTES);
    assert.equal(VolumeCreate.parse({ ...goodCreate, name }).name, name);
  });

  test("a parameters map of exactly 4 KiB is accepted", () => {
    const parameters = { k: "v".repeat(CSI_MAP_MAX_BYTES - 1) };
    assert.equal(mapBytes(parameters), CSI_MAP_MAX_BYTES);
    assert.deepEqual(VolumeCreate.parse({ ...goodCreate, parameters }).parameters, parameters);
  });

  const bad: Array<[string, unknown, RegExp[]]> = [
    ["empty name", { ...goodCreate, name: "" }, [/^name: /, /name is required/]],
    ["129-byte name", { ...goodCreate, name: "n".repeat(129) }, [/^name: /, /at most 128 bytes/]],
    ["129-byte name of multi-byte chars (65 chars)", { ...goodCreate, name: `${"é".repeat(64)}x` }, [/^name: /, /128 bytes/]],
    ["name with a newline", { ...goodCreate, name: "pvc\n1" }, [/^name: /, /control characters/]],
    ["name with NUL", { ...goodCreate, name: "pvc\u00001" }, [/^name: /, /control characters/]],
    ["name with DEL", { ...goodCreate, name: "pvc\u007f" }, [/^name: /, /control characters/]],
    ["missing name", { ...goodCreate, name: undefined }, [/^name: /]],
    ["negative size", { ...goodCreate, sizeBytes: -1 }, [/sizeBytes: /]],
    ["zero size", { ...goodCreate, sizeBytes: 0 }, [/sizeBytes: /]],
    ["fractional size", { ...goodCreate, sizeBytes: 1.5 }, [/sizeBytes: /]],
    ["string size", { ...goodCreate, sizeBytes: "10" }, [/sizeBytes: /]],
    ["negative limit", { ...goodCreate, limitBytes: -1 }, [/limitBytes: /]],
    ["no capabilities (empty)", { ...goodCreate, capabilities: [] }, [/capabilities: /]],
    ["no capabilities (missing)", { ...goodCreate, capabilities: undefined }, [/capabilities: /]],
    ["unknown accessMode", { ...goodCreate, capabilities: [{ accessType: "mount", accessMode: "EVERYONE_WRITES" }] }, [/capabilities\.0\.accessMode: /]],
    ["unknown accessType", { ...goodCreate, capabilities: [{ accessType: "nfs", accessMode: "SINGLE_NODE_WRITER" }] }, [/capabilities\.0\.accessType: /]],
    ["parameters map over 4 KiB (one big value)", { ...goodCreate, parameters: { k: "v".repeat(CSI_MAP_MAX_BYTES) } }, [/^parameters: /, /4096 bytes/]],
    [
      "parameters map over 4 KiB (many small entries)",
      { ...goodCreate, parameters: Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`key${i}`, "value"])) },
      [/^parameters: /, /4096 bytes/],
    ],
    ["parameter value not a string", { ...goodCreate, parameters: { a: 1 } }, [/parameters\.a: /]],
    ["empty requestId", { ...goodCreate, requestId: "" }, [/requestId: /]],
    ["bad source uuid", { ...goodCreate, source: { kind: "volume", uuid: "nope" } }, [/source\.uuid: /, /lowercase 36-character uuid/]],
    ["unknown source kind", { ...goodCreate, source: { kind: "backup", uuid: UUID } }, [/source/]],
    ["not an object", "create me", [/\(root\): /]],
  ];
  for (const [label, input, patterns] of bad) {
    test(`rejects ${label}`, () => {
      const msg = failMessage(VolumeCreate, input);
      for (const p of patterns) assert.match(msg, p);
    });
  }

  test("several problems are reported together, each with its path", () => {
    const msg = failMessage(VolumeCreate, { requestId: "r", name: "", sizeBytes: -1, capabilities: [] });
    assert.match(msg, /name: /);
    assert.match(msg, /sizeBytes: /);
    assert.match(msg, /capabilities: /);
    assert.equal(msg.split("; ").length, 3);
  });
});

describe("other journal requests", () => {
  const bad: Array<[string, z.ZodTypeAny, unknown, RegExp]> = [
    ["VolumeDelete with a bad uuid", VolumeDelete, { requestId: "r", uuid: "not-a-uuid" }, /^uuid: must be a lowercase 36-character uuid$/],
    ["VolumeDelete with an uppercase uuid", VolumeDelete, { requestId: "r", uuid: UUID.toUpperCase() }, /^uuid: /],
    ["VolumeDelete without a uuid", VolumeDelete, { requestId: "r" }, /^uuid: /],
    ["VolumeDelete with a 129-char requestId", VolumeDelete, { requestId: "r".repeat(129), uuid: UUID }, /^requestId: /],
    ["VolumeExpand with zero size", VolumeExpand, { requestId: "r", uuid: UUID, sizeBytes: 0 }, /^sizeBytes: /],
  ];
  for (const [label, schema, input, pattern] of bad) {
    test(`rejects ${label}`, () => assert.match(failMessage(schema, input), pattern));
  }

  test("VolumeDelete accepts a good request", () => {
    assert.deepEqual(VolumeDelete.parse({ requestId: "r", uuid: UUID }), { requestId: "r", uuid: UUID });
  });

  test("every contract entry is a <family>.<verb> name that makes a command subject", () => {
    for (const c of Object.keys(journalContract) as Array<keyof typeof journalContract>) {
      assert.match(c, /^(volume|snapshot|groupsnapshot|pool|device|audit)\.[a-z]+$/, c);
      assert.equal(subjects.command("c1", c), `csi.c1.journal.${c}`);
    }
  });

  test("reply envelope: ok and error shapes", () => {
    const env = replyEnvelope(journalContract["volume.delete"].result);
    assert.deepEqual(env.parse({ ok: true, result: { deleted: true } }), { ok: true, result: { deleted: true } });
    assert.deepEqual(env.parse({ ok: false, error: { code: "NotFound", message: "gone" } }), {
      ok: false,
      error: { code: "NotFound", message: "gone" },
    });
    assert.equal(env.safeParse({ ok: false, error: { code: "Teapot", message: "x" } }).success, false);
    assert.equal(env.safeParse({ ok: true, result: { deleted: "yes" } }).success, false);
  });
});

describe("CsiName and StringMap", () => {
  const names: Array<[string, boolean]> = [
    ["a", true],
    ["名字", true],
    ["n".repeat(128), true],
    ["n".repeat(129), false],
    ["", false],
    ["a\tb", false],
    ["a\rb", false],
  ];
  for (const [n, ok] of names) {
    test(`CsiName ${JSON.stringify(n).slice(0, 20)} → ${ok}`, () => assert.equal(CsiName.safeParse(n).success, ok));
  }

  test("mapBytes counts UTF-8 bytes of keys and values", () => {
    assert.equal(mapBytes({}), 0);
    assert.equal(mapBytes({ ab: "cd" }), 4);
    assert.equal(mapBytes({ é: "名" }), 2 + 3);
  });

  test("StringMap boundary: 4096 bytes ok, 4097 not", () => {
    assert.equal(StringMap.safeParse({ kk: "v".repeat(4094) }).success, true);
    assert.equal(StringMap.safeParse({ kk: "v".repeat(4095) }).success, false);
  });
});

describe("JournalEvent", () => {
  const reserved = {
    type: "VolumeReserved",
    v: 1,
    time: "2024-01-01T00:00:00.000Z",
    requestId: "req-1",
    actor: { service: "journal", replica: "host:1" },
    uuid: UUID,
    name: "pvc-1",
    instance: "default",
    pool: "default",
    poolId: 1,
    imageName: `csi-vol-${UUID}`,
    sizeBytes: 1 << 30,
    digest: "sha256:abc",
    parameters: {},
    capabilities: [{ accessType: "mount", accessMode: "SINGLE_NODE_WRITER" }],
  };

  test("parses a valid VolumeReserved", () => {
    const r = JournalEvent.safeParse(reserved);
    assert.ok(r.success, r.success ? "" : describeZodError(r.error));
    assert.deepEqual(r.data, reserved);
    assert.equal(r.data.type, "VolumeReserved");
    assert.deepEqual(VolumeReserved.parse(reserved), reserved);
  });

  test("parses other event types", () => {
    const meta = { v: 1, time: "t", requestId: "r", actor: { service: "s", replica: "r" } };
    for (const e of [
      { type: "NameReserved", ...meta, kind: "volume", name: "n", uuid: UUID },
      { type: "VolumeCreated", ...meta, uuid: UUID, imageId: "img", sizeBytes: 1 },
      { type: "VolumeDeleted", ...meta, uuid: UUID },
      { type: "SnapshotCreated", ...meta, uuid: UUID, imageId: "img", sizeBytes: 0 },
      { type: "ReservationUndone", ...meta, kind: "snapshot", uuid: UUID, reason: "boom" },
    ]) {
      assert.deepEqual(JournalEvent.parse(e), e);
    }
  });

  const { actor: _actor, ...noActor } = reserved;
  const bad: Array<[string, unknown, RegExp]> = [
    ["missing actor", noActor, /^actor: /],
    ["actor with an empty service", { ...reserved, actor: { service: "", replica: "r" } }, /^actor\.service: /],
    ["v: 2", { ...reserved, v: 2 }, /^v: /],
    ["v missing", { ...reserved, v: undefined }, /^v: /],
    ["unknown type", { ...reserved, type: "VolumeTeleported" }, /^type: /],
    ["no type", { ...reserved, type: undefined }, /^type: /],
    ["bad uuid", { ...reserved, uuid: "x" }, /^uuid: /],
    ["zero size", { ...reserved, sizeBytes: 0 }, /^sizeBytes: /],
    ["negative poolId", { ...reserved, poolId: -1 }, /^poolId: /],
  ];
  for (const [label, input, pattern] of bad) {
    test(`rejects VolumeReserved with ${label}`, () => assert.match(failMessage(JournalEvent, input), pattern));
  }
});

describe("resolveClusters", () => {
  const dataDir = "/var/lib/csi";

  test("fills defaults: default cluster = first, default pool = first, pool roots under dataDir/pools/<cluster>/<pool>", () => {
    const c = resolveClusters(
      {
        clusters: [
          {
            clusterID: "east",
            pools: [
              { name: "fast", id: 3 },
              { name: "slow", id: 7, root: "/mnt/slow" },
            ],
          },
          { clusterID: "west", instance: "drv2", pools: [{ name: "only", id: 0 }] },
        ],
      },
      dataDir,
    );
    assert.equal(c.defaultCluster, "east");
    assert.equal(c.clusters.length, 2);
    const east = c.get("east");
    assert.ok(east);
    assert.equal(east.defaultPool, "fast");
    assert.equal(east.instance, "default");
    assert.deepEqual(
      east.pools.map((p) => [p.name, p.id, p.root]),
      [
        ["fast", 3, path.resolve(dataDir, "pools", "east", "fast")],
        ["slow", 7, "/mnt/slow"],
      ],
    );
    const west = c.get("west");
    assert.ok(west);
    assert.equal(west.instance, "drv2");
    assert.equal(west.defaultPool, "only");
    assert.equal(west.pools[0]?.root, path.resolve(dataDir, "pools", "west", "only"));
    assert.equal(c.get("north"), undefined);
  });

  test("a relative dataDir gives absolute pool roots", () => {
    const c = resolveClusters({ clusters: [{ clusterID: "c", pools: [{ name: "p", id: 1 }] }] }, "rel/data");
    const root = c.clusters[0]?.pools[0]?.root ?? "";
    assert.ok(path.isAbsolute(root), root);
    assert.equal(root, path.resolve("rel/data/pools/c/p"));
  });

  test("explicit defaultCluster and defaultPool are honoured", () => {
    const c = resolveClusters(
      {
        defaultCluster: "b",
        clusters: [
          { clusterID: "a", pools: [{ name: "p1", id: 1 }] },
          {
            clusterID: "b",
            defaultPool: "p2",
            pools: [
              { name: "p1", id: 1 },
              { name: "p2", id: 2 },
            ],
          },
        ],
      },
      dataDir,
    );
    assert.equal(c.defaultCluster, "b");
    assert.equal(c.get("b")?.defaultPool, "p2");
  });

  test("DEFAULT_CLUSTERS resolves to one local cluster with one pool", () => {
    const c = resolveClusters(DEFAULT_CLUSTERS, dataDir);
    assert.equal(c.defaultCluster, "local");
    assert.deepEqual(
      c.clusters.map((x) => [x.clusterID, x.defaultPool, x.pools.map((p) => p.id)]),
      [["local", "default", [1]]],
    );
  });

  const rbd = {
    name: "ceph",
    id: 2,
    kind: "rbd",
    monitors: ["[v2:10.0.0.1:3300,v1:10.0.0.1:6789]", "10.0.0.2:6789"],
    user: "csi",
    keyFile: "/etc/csi/ceph/userKey",
  };

  test("one cluster mixes file and RBD pools: kind defaults to file, an RBD pool has no root and keeps its Ceph settings", () => {
    const c = resolveClusters(
      {
        clusters: [
          {
            clusterID: "mix",
            pools: [
              { name: "local", id: 1 },
              { ...rbd, cephPool: "kube", imageFeatures: ["layering", "deep-flatten"], maxCloneDepth: 4 },
            ],
          },
        ],
      },
      dataDir,
    );
    const [file, ceph] = c.get("mix")?.pools ?? [];
    assert.deepEqual([file?.kind, file?.root], ["file", path.resolve(dataDir, "pools", "mix", "local")]);
    assert.ok(ceph?.kind === "rbd");
    assert.equal(ceph.root, undefined);
    assert.deepEqual(
      [ceph.cephPool, ceph.user, ceph.keyFile, ceph.monitors.length, ceph.imageFeatures, ceph.maxCloneDepth],
      ["kube", "csi", "/etc/csi/ceph/userKey", 2, ["layering", "deep-flatten"], 4],
    );
  });

  const bad: Array<[string, unknown, RegExp]> = [
    ["an RBD pool without a user", { clusters: [{ clusterID: "a", pools: [{ ...rbd, user: undefined }] }] }, /pools\.0\.user: /],
    ["an RBD pool without monitors", { clusters: [{ clusterID: "a", pools: [{ ...rbd, monitors: [] }] }] }, /pools\.0\.monitors: /],
    ["a monitor with a space", { clusters: [{ clusterID: "a", pools: [{ ...rbd, monitors: ["10.0.0.1:6789 x"] }] }] }, /pools\.0\.monitors\.0: a monitor is/],
    ["an RBD pool with its key inline", { clusters: [{ clusterID: "a", pools: [{ ...rbd, key: "AQB..." }] }] }, /pools\.0: .*key/i],
    ["RBD features without layering", { clusters: [{ clusterID: "a", pools: [{ ...rbd, imageFeatures: ["deep-flatten"] }] }] }, /include layering/],
    [
      "fast-diff without object-map",
      { clusters: [{ clusterID: "a", pools: [{ ...rbd, imageFeatures: ["layering", "fast-diff"] }] }] },
      /fast-diff needs object-map/,
    ],
    ["an unknown pool kind", { clusters: [{ clusterID: "a", pools: [{ name: "p", id: 1, kind: "nfs" }] }] }, /pools\.0\.kind: /],
    [
      "duplicate cluster ids",
      {
        clusters: [
          { clusterID: "a", pools: [{ name: "p", id: 1 }] },
          { clusterID: "a", pools: [{ name: "q", id: 2 }] },
        ],
      },
      /duplicate cluster a/,
    ],
    [
      "duplicate pool ids",
      {
        clusters: [
          {
            clusterID: "a",
            pools: [
              { name: "p", id: 1 },
              { name: "q", id: 1 },
            ],
          },
        ],
      },
      /duplicate pool id 1 in a/,
    ],
    ["unknown defaultCluster", { defaultCluster: "zz", clusters: [{ clusterID: "a", pools: [{ name: "p", id: 1 }] }] }, /default cluster zz is not configured/],
    ["unknown defaultPool", { clusters: [{ clusterID: "a", defaultPool: "nope", pools: [{ name: "p", id: 1 }] }] }, /default pool nope is not a pool of a/],
    ["cluster id with a dot", { clusters: [{ clusterID: "a.b", pools: [{ name: "p", id: 1 }] }] }, /clusterID: cluster ids are/],
    ["cluster id with a space", { clusters: [{ clusterID: "a b", pools: [{ name: "p", id: 1 }] }] }, /clusterID: /],
    ["cluster id with a star", { clusters: [{ clusterID: "*", pools: [{ name: "p", id: 1 }] }] }, /clusterID: /],
    ["empty cluster id", { clusters: [{ clusterID: "", pools: [{ name: "p", id: 1 }] }] }, /clusterID: /],
    ["65-char cluster id", { clusters: [{ clusterID: "x".repeat(65), pools: [{ name: "p", id: 1 }] }] }, /clusterID: /],
    ["no clusters", { clusters: [] }, /clusters: /],
    ["no pools", { clusters: [{ clusterID: "a", pools: [] }] }, /pools: /],
    ["negative pool id", { clusters: [{ clusterID: "a", pools: [{ name: "p", id: -1 }] }] }, /pools\.0\.id: /],
    ["pool id above 2^53-1", { clusters: [{ clusterID: "a", pools: [{ name: "p", id: 2 ** 53 }] }] }, /pools\.0\.id: /],
    ["bad pool name", { clusters: [{ clusterID: "a", pools: [{ name: "../etc", id: 1 }] }] }, /pools\.0\.name: /],
    ["bad instance", { clusters: [{ clusterID: "a", instance: "a.b", pools: [{ name: "p", id: 1 }] }] }, /instance: /],
    ["not an object", "clusters", /\(root\): /],
  ];
  for (const [label, raw, pattern] of bad) {
    test(`rejects ${label} with DriverError InvalidArgument`, () => {
      assert.throws(
        () => resolveClusters(raw, dataDir),
        (e: unknown) => {
          assert.ok(e instanceof DriverError, `expected DriverError, got ${String(e)}`);
          assert.equal(e.code, "InvalidArgument");
          assert.match(e.message, /^clusters config: /);
          assert.match(e.message, pattern);
          return true;
        },
      );
    });
  }
});

describe("errors", () => {
  const table: Array<[ErrorName, number]> = [
    ["InvalidArgument", 3],
    ["NotFound", 5],
    ["AlreadyExists", 6],
    ["FailedPrecondition", 9],
    ["Aborted", 10],
    ["OutOfRange", 11],
    ["ResourceExhausted", 8],
    ["Unavailable", 14],
    ["Unimplemented", 12],
    ["Inconsistent", 13],
    ["Internal", 13],
    ["DeadlineExceeded", 4],
  ];
  for (const [name, code] of table) {
    test(`grpcCodeOf(${name}) = ${code}`, () => assert.equal(grpcCodeOf(name), code));
  }

  test("the table covers every ErrorName", () => {
    assert.deepEqual(new Set(table.map(([n]) => n)), new Set(ErrorName.options));
    assert.equal(table.length, ErrorName.options.length);
    for (const n of ErrorName.options) {
      const c = grpcCodeOf(n);
      assert.ok(Number.isInteger(c) && c > 0 && c <= 16, `${n} → ${c}`);
      assert.notEqual(c, GrpcCode.UNKNOWN);
    }
  });

  test("toWireError keeps DriverError code and message", () => {
    assert.deepEqual(toWireError(notFound("volume x not found")), { code: "NotFound", message: "volume x not found" });
    assert.deepEqual(toWireError(new DriverError("Inconsistent", "look")), { code: "Inconsistent", message: "look" });
  });

  const foreign: Array<[string, unknown]> = [
    ["Error with a secret", new Error("ECONNREFUSED 10.0.0.1 password=hunter2")],
    ["TypeError", new TypeError("cannot read properties of undefined")],
    ["string", "boom"],
    ["undefined", undefined],
    ["null", null],
    ["object that looks like a DriverError", { name: "DriverError", code: "NotFound", message: "fake" }],
  ];
  for (const [label, err] of foreign) {
    test(`toWireError hides a ${label}`, () => {
      const w = toWireError(err);
      assert.deepEqual(w, { code: "Internal", message: "internal error" });
      assert.equal(WireError.safeParse(w).success, true);
    });
  }

  test("fromWireError round trips through toWireError", () => {
    const e = fromWireError(toWireError(invalidArgument("bad size")));
    assert.ok(e instanceof DriverError);
    assert.equal(e.code, "InvalidArgument");
    assert.equal(e.message, "bad size");
    assert.equal(e.name, "DriverError");
  });
});

describe("audit commands and gc events", () => {
  const U = "36eaa70e-eb63-11ea-8e79-246e96907f74";
  test("a replay point is a stream sequence or an ISO time; nothing else", () => {
    const replay = journalContract["audit.replay"].request;
    for (const at of [0, 42, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.123+02:00"]) assert.equal(replay.safeParse({ at }).success, true, String(at));
    for (const at of [-1, 1.5, "yesterday", "42", "2026-13-45T00:00:00Z", ""]) assert.equal(replay.safeParse({ at }).success, false, String(at));
    assert.deepEqual(replay.parse({ at: 3, uuid: U }), { at: 3, uuid: U, maxEntries: 0 });
  });
  test("gc is a dry run unless asked; verify and gc take the orphan age", () => {
    assert.deepEqual(journalContract["audit.gc"].request.parse({ requestId: "r" }), {
      requestId: "r",
      apply: false,
      olderThanMs: DEFAULT_ORPHAN_AGE_MS,
      maxActions: 1000,
    });
    assert.equal(journalContract["audit.verify"].request.safeParse({ olderThanMs: -1 }).success, false);
  });
  test("ImageLeakCollected and ReservationCollected are events of schema version 1", () => {
    const meta = { v: 1, time: "t", requestId: "r", actor: { service: "journal", replica: "1" } };
    assert.equal(
      JournalEvent.safeParse({ ...meta, type: "ImageLeakCollected", pool: "p", imageName: "x", imageId: "1", sizeBytes: 0, reason: "gc" }).success,
      true,
    );
    assert.equal(JournalEvent.safeParse({ ...meta, type: "ReservationCollected", kind: "volume", uuid: U, reason: "gc" }).success, true);
    assert.equal(JournalEvent.safeParse({ ...meta, v: 2, type: "ReservationCollected", kind: "volume", uuid: U, reason: "gc" }).success, false);
  });
});
