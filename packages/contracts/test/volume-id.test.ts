import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DriverError } from "../src/errors.js";
import { composeVolumeId, decomposeVolumeId, isUuid, MAX_ID_BYTES, VOLUME_ID_VERSION, VolumeIdError } from "../src/volume-id.js";

/** ceph-csi's published example (docs/design/proposals/rbd-snap-clone / CSIIdentifier). */
const CEPH_EXAMPLE = "0001-0024-0bba3be9-0a1c-41db-a619-26ffea20161e-0000000000000004-36eaa70e-eb63-11ea-8e79-246e96907f74";
const CEPH_CLUSTER = "0bba3be9-0a1c-41db-a619-26ffea20161e";
const CEPH_UUID = "36eaa70e-eb63-11ea-8e79-246e96907f74";
const UUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

/** Assert `fn` throws a VolumeIdError (NotFound) and nothing else. */
function assertVolumeIdError(fn: () => unknown, label: string): void {
  let thrown: unknown;
  let result: unknown;
  try {
    result = fn();
  } catch (e) {
    thrown = e;
  }
  assert.ok(thrown !== undefined, `${label}: expected a VolumeIdError, got a result ${JSON.stringify(result)}`);
  assert.ok(thrown instanceof VolumeIdError, `${label}: expected VolumeIdError, got ${String(thrown)}`);
  assert.ok(thrown instanceof DriverError, `${label}: VolumeIdError must be a DriverError`);
  assert.equal(thrown.code, "NotFound", label);
  assert.match(thrown.message, /^malformed volume id: /, label);
}

/** Replace the character at `i`. */
const setAt = (s: string, i: number, c: string) => s.slice(0, i) + c + s.slice(i + 1);
const removeAt = (s: string, i: number) => s.slice(0, i) + s.slice(i + 1);

describe("decomposeVolumeId: ceph-csi compatibility", () => {
  test("decodes ceph-csi's published example", () => {
    assert.deepEqual(decomposeVolumeId(CEPH_EXAMPLE), {
      version: 1,
      clusterID: CEPH_CLUSTER,
      poolID: 4,
      uuid: CEPH_UUID,
    });
  });

  test("composing the example's parts gives back the exact example", () => {
    assert.equal(composeVolumeId({ clusterID: CEPH_CLUSTER, poolID: 4, uuid: CEPH_UUID }), CEPH_EXAMPLE);
  });

  test("the encoding version constant is 1 and the max id length is 128", () => {
    assert.equal(VOLUME_ID_VERSION, 1);
    assert.equal(MAX_ID_BYTES, 128);
  });
});

describe("composeVolumeId / decomposeVolumeId round trips", () => {
  const clusters: Array<[string, string]> = [
    ["1-char", "a"],
    ["digits only", "7"],
    ["plain", "local"],
    ["dashes inside", "a-b-c"],
    ["leading and trailing dash", "-x-"],
    ["only dashes", "---"],
    ["looks like a header", "0001-0024-"],
    ["a uuid (ceph-csi's fsid)", CEPH_CLUSTER],
    ["63 chars", "c".repeat(63)],
    ["64-char max", "m".repeat(64)],
    ["64-char max with dashes", "-".repeat(32) + "d".repeat(32)],
  ];
  const pools: Array<[string, number]> = [
    ["0", 0],
    ["1", 1],
    ["255", 255],
    ["2^32", 2 ** 32],
    ["2^53-1", Number.MAX_SAFE_INTEGER],
  ];
  for (const [clabel, clusterID] of clusters) {
    for (const [plabel, poolID] of pools) {
      test(`cluster ${clabel}, pool ${plabel}`, () => {
        const id = composeVolumeId({ clusterID, poolID, uuid: UUID });
        assert.ok(Buffer.byteLength(id, "utf8") <= MAX_ID_BYTES, `id is ${Buffer.byteLength(id)} bytes`);
        assert.equal(id.length, 64 + clusterID.length);
        // Header fields are lowercase, fixed-width hex.
        assert.equal(id.slice(0, 10), `0001-${clusterID.length.toString(16).padStart(4, "0")}-`);
        assert.match(id.slice(11 + clusterID.length, 27 + clusterID.length), /^[0-9a-f]{16}$/);
        assert.deepEqual(decomposeVolumeId(id), { version: 1, clusterID, poolID, uuid: UUID });
      });
    }
  }

  test("pool 2^53-1 is encoded as 001fffffffffffff", () => {
    const id = composeVolumeId({ clusterID: "c", poolID: Number.MAX_SAFE_INTEGER, uuid: UUID });
    assert.equal(id, `0001-0001-c-001fffffffffffff-${UUID}`);
  });

  test("the longest id (64-byte cluster) is exactly 128 bytes", () => {
    const id = composeVolumeId({ clusterID: "z".repeat(64), poolID: 1, uuid: UUID });
    assert.equal(Buffer.byteLength(id, "utf8"), 128);
    assert.equal(id.slice(0, 10), "0001-0040-");
  });

  test("distinct parts give distinct ids (cluster/pool boundary is unambiguous)", () => {
    const ids = new Set([
      composeVolumeId({ clusterID: "a-b", poolID: 1, uuid: UUID }),
      composeVolumeId({ clusterID: "a", poolID: 1, uuid: UUID }),
      composeVolumeId({ clusterID: "a-", poolID: 1, uuid: UUID }),
      composeVolumeId({ clusterID: "a", poolID: 2, uuid: UUID }),
      composeVolumeId({ clusterID: "a", poolID: 1, uuid: CEPH_UUID }),
    ]);
    assert.equal(ids.size, 5);
  });
});

describe("decomposeVolumeId rejects malformed ids with VolumeIdError (NotFound)", () => {
  // A valid id to mutate: cluster "c1-x" (len 4), pool 0x2a, UUID.
  const VALID = `0001-0004-c1-x-000000000000002a-${UUID}`;
  const cl = 4;
  const afterCluster = 10 + cl; // index of the dash after the cluster id
  const afterPool = afterCluster + 17; // index of the dash after the pool id

  test("the base id used below is itself valid", () => {
    assert.deepEqual(decomposeVolumeId(VALID), { version: 1, clusterID: "c1-x", poolID: 42, uuid: UUID });
    assert.equal(VALID[afterCluster], "-");
    assert.equal(VALID[afterPool], "-");
  });

  const cases: Array<[string, string]> = [
    ["empty", ""],
    ["csi-sanity's fake id", "some-vol-id"],
    ["a bare uuid", UUID],
    ["too short: 64 bytes (no room for a cluster id)", `0001-0000--000000000000002a-${UUID}`.slice(0, 64)],
    ["too short: last uuid char dropped", VALID.slice(0, -1)],
    ["too long: 129 bytes (65-byte cluster, length field 0x41)", `0001-0041-${"x".repeat(65)}-0000000000000001-${UUID}`],
    ["too long: valid 128-byte id plus one char", `${composeVolumeId({ clusterID: "y".repeat(64), poolID: 1, uuid: UUID })}0`],
    ["too long: 1000 bytes", "0".repeat(1000)],
    ["bad hex in version", setAt(VALID, 3, "g")],
    ["bad hex in version (sign)", `-001${VALID.slice(4)}`],
    ["bad hex in version (space)", ` 001${VALID.slice(4)}`],
    ["bad hex in length", setAt(VALID, 8, "z")],
    ["bad hex in length (0x prefix)", `0001-0x04${VALID.slice(9)}`],
    ["bad hex in pool", setAt(VALID, afterCluster + 16, "g")],
    ["bad hex in pool (sign)", setAt(VALID, afterCluster + 1, "-")],
    ["bad hex in pool (space)", setAt(VALID, afterCluster + 1, " ")],
    ["pool id above 2^53-1", `0001-0004-c1-x-0020000000000000-${UUID}`],
    ["pool id ffffffffffffffff", `0001-0004-c1-x-ffffffffffffffff-${UUID}`],
    ["wrong version 0002", `0002${VALID.slice(4)}`],
    ["wrong version 0000", `0000${VALID.slice(4)}`],
    ["wrong version ffff", `ffff${VALID.slice(4)}`],
    ["cluster length 0", `0001-0000${VALID.slice(9)}`],
    ["cluster length pointing past the end", `0001-0064${VALID.slice(9)}`],
    ["cluster length ffff", `0001-ffff${VALID.slice(9)}`],
    ["cluster length too short by one", `0001-0003${VALID.slice(9)}`],
    ["cluster length too long by one", `0001-0005${VALID.slice(9)}`],
    ["ceph example with cluster length too short by one", `0001-0023${CEPH_EXAMPLE.slice(9)}`],
    ["ceph example with cluster length too long by one", `0001-0025${CEPH_EXAMPLE.slice(9)}`],
    ["dash after version replaced", setAt(VALID, 4, "0")],
    ["dash after length replaced", setAt(VALID, 9, "0")],
    ["dash after cluster replaced", setAt(VALID, afterCluster, "0")],
    ["dash after pool replaced", setAt(VALID, afterPool, "0")],
    ["dash after version removed", removeAt(VALID, 4)],
    ["dash after length removed", removeAt(VALID, 9)],
    ["dash after cluster removed", removeAt(VALID, afterCluster)],
    ["dash after pool removed", removeAt(VALID, afterPool)],
    ["dash after version replaced by '_'", setAt(VALID, 4, "_")],
    ["dash after pool replaced by ':'", setAt(VALID, afterPool, ":")],
    ["uuid with its first dash replaced", setAt(VALID, afterPool + 9, "0")],
    ["uuid with its last dash replaced", setAt(VALID, afterPool + 24, "0")],
    ["uuid uppercase (contract: lowercase only)", `0001-0004-c1-x-000000000000002a-${UUID.toUpperCase()}`],
    ["uuid with one uppercase hex digit", `0001-0004-c1-x-000000000000002a-${UUID.slice(0, -1)}D`],
    ["uuid with a non-hex char", setAt(VALID, VALID.length - 1, "g")],
    ["uuid in braces (same length)", `0001-0004-c1-x-000000000000002a-{${UUID.slice(1, -1)}}`],
    ["non-ASCII in cluster (é)", setAt(VALID, 10, "é")],
    ["non-ASCII in uuid (fullwidth digit)", setAt(VALID, VALID.length - 1, "４")],
    ["non-ASCII in version (Arabic-Indic digit)", setAt(VALID, 0, "٠")],
    ["non-ASCII emoji in cluster", `0001-0004-c🙂x${VALID.slice(14)}`],
    ["NUL in the middle of the uuid", setAt(VALID, VALID.length - 5, "\u0000")],
    ["trailing newline", `${VALID}\n`],
    ["leading space", ` ${VALID}`],
  ];

  for (const [label, id] of cases) {
    test(label, () => {
      assertVolumeIdError(() => decomposeVolumeId(id), label);
    });
  }

  test("the too-long case really is 129 bytes", () => {
    const id = `0001-0041-${"x".repeat(65)}-0000000000000001-${UUID}`;
    assert.equal(Buffer.byteLength(id, "utf8"), 129);
  });

  test("every proper prefix of a valid id is rejected", () => {
    for (const base of [VALID, CEPH_EXAMPLE]) {
      for (let n = 0; n < base.length; n++) {
        assertVolumeIdError(() => decomposeVolumeId(base.slice(0, n)), `prefix ${n} of ${base}`);
      }
    }
  });

  test("single-character mutations either fail with VolumeIdError or decode to exactly what they encode", () => {
    const alphabet = ["0", "9", "a", "f", "g", "z", "A", "F", "-", "_", ".", " ", "\t", "é", "\u0000", "\u00ff"];
    for (const base of [VALID, CEPH_EXAMPLE]) {
      for (let i = 0; i < base.length; i++) {
        for (const c of alphabet) {
          const m = setAt(base, i, c);
          let parts: ReturnType<typeof decomposeVolumeId>;
          try {
            parts = decomposeVolumeId(m);
          } catch (e) {
            assert.ok(e instanceof VolumeIdError, `mutation ${JSON.stringify(m)} threw ${String(e)}`);
            continue;
          }
          // Decoded: it must re-encode to the same id (hex header fields are case-insensitive).
          const again = composeVolumeId(parts);
          assert.equal(again.length, m.length, `mutation ${JSON.stringify(m)}`);
          assert.equal(again.toLowerCase(), m.toLowerCase(), `mutation ${JSON.stringify(m)}`);
          assert.equal(parts.clusterID, m.slice(10, 10 + parts.clusterID.length));
          assert.ok(isUuid(parts.uuid));
          assert.equal(parts.version, 1);
        }
      }
    }
  });

  test("a wrong cluster length landing on a dash inside the cluster id is rejected", () => {
    // A cluster length that lands on a '-' inside the cluster must not be accepted unless the total matches.
    const id = composeVolumeId({ clusterID: "a-b-c", poolID: 3, uuid: UUID });
    for (const len of [1, 2, 3, 4, 6, 7]) {
      const m = `0001-${len.toString(16).padStart(4, "0")}${id.slice(9)}`;
      assertVolumeIdError(() => decomposeVolumeId(m), `length ${len}`);
    }
  });
});

describe("composeVolumeId rejects bad parts with VolumeIdError", () => {
  const cases: Array<[string, Parameters<typeof composeVolumeId>[0]]> = [
    ["empty cluster id", { clusterID: "", poolID: 1, uuid: UUID }],
    ["65-byte cluster id", { clusterID: "x".repeat(65), poolID: 1, uuid: UUID }],
    ["65-byte multi-byte cluster id (33 × 'é' = 66 bytes)", { clusterID: "é".repeat(33), poolID: 1, uuid: UUID }],
    ["uppercase uuid", { clusterID: "c", poolID: 1, uuid: UUID.toUpperCase() }],
    ["uuid without dashes", { clusterID: "c", poolID: 1, uuid: UUID.replaceAll("-", "") }],
    ["short uuid", { clusterID: "c", poolID: 1, uuid: UUID.slice(0, -1) }],
    ["empty uuid", { clusterID: "c", poolID: 1, uuid: "" }],
    ["uuid with trailing newline", { clusterID: "c", poolID: 1, uuid: `${UUID}\n` }],
    ["negative pool id", { clusterID: "c", poolID: -1, uuid: UUID }],
    ["fractional pool id", { clusterID: "c", poolID: 1.5, uuid: UUID }],
    ["pool id 2^53", { clusterID: "c", poolID: 2 ** 53, uuid: UUID }],
    ["NaN pool id", { clusterID: "c", poolID: Number.NaN, uuid: UUID }],
    ["version 0x10000", { clusterID: "c", poolID: 1, uuid: UUID, version: 0x10000 }],
    ["negative version", { clusterID: "c", poolID: 1, uuid: UUID, version: -1 }],
  ];
  for (const [label, parts] of cases) {
    test(label, () => {
      assertVolumeIdError(() => composeVolumeId(parts), label);
    });
  }

  test("64-byte cluster id is accepted, 65 is not (boundary)", () => {
    assert.doesNotThrow(() => composeVolumeId({ clusterID: "x".repeat(64), poolID: 1, uuid: UUID }));
    assert.throws(() => composeVolumeId({ clusterID: "x".repeat(65), poolID: 1, uuid: UUID }), VolumeIdError);
  });
});

describe("isUuid", () => {
  const table: Array<[string, boolean]> = [
    [UUID, true],
    [CEPH_UUID, true],
    ["00000000-0000-0000-0000-000000000000", true],
    [UUID.toUpperCase(), false],
    [UUID.slice(1), false],
    [`${UUID}0`, false],
    [UUID.replaceAll("-", ""), false],
    ["", false],
    [`${UUID}\n`, false],
  ];
  for (const [s, want] of table) {
    test(`${JSON.stringify(s)} → ${want}`, () => assert.equal(isUuid(s), want));
  }
});

describe("compose only makes ids decompose accepts", () => {
  const uuid = "36eaa70e-eb63-11ea-8e79-246e96907f74";
  for (const clusterID of ["é", "a b", "tab\there"]) {
    test(`cluster id ${JSON.stringify(clusterID)} is refused`, () => {
      assert.throws(() => composeVolumeId({ clusterID, poolID: 1, uuid }), VolumeIdError);
    });
  }
  test("only encoding version 1 is composed", () => {
    assert.throws(() => composeVolumeId({ clusterID: "c", poolID: 1, uuid, version: 2 }), VolumeIdError);
  });
});
