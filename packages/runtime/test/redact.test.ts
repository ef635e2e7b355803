import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { redactSecrets } from "../src/rpc/redact.js";

const STRIPPED = "***stripped***";
const SECRET = "hunter2";

/** A CSI CreateVolumeRequest as grpc-js hands it over (keepCase: true). */
function createVolumeRequest() {
  return {
    name: "pvc-0bba3be9",
    capacity_range: { required_bytes: "1073741824", limit_bytes: "0" },
    volume_capabilities: [{ mount: { fs_type: "ext4", mount_flags: ["noatime"] }, access_mode: { mode: "SINGLE_NODE_WRITER" }, access_type: "mount" }],
    parameters: { pool: "fast", password: "not-a-secret-field" },
    secrets: { password: SECRET, "user.name": "admin-hunter2" },
    volume_content_source: { snapshot: { snapshot_id: "snap-1" }, type: "snapshot" },
    accessibility_requirements: null,
    mutable_parameters: {},
  };
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === "object") {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

describe("redactSecrets on CSI requests", () => {
  test("NodePublishVolume: the kubelet's service account tokens in volume_context are stripped, the pod's names kept", () => {
    const req = {
      volume_id: "v1",
      target_path: "/t",
      volume_context: {
        "csi.storage.k8s.io/pod.name": "db-0",
        "csi.storage.k8s.io/serviceAccount.tokens": `{"vault":{"token":"${SECRET}"}}`,
      },
    };
    const out = redactSecrets(req) as typeof req;
    assert.deepEqual(out.volume_context, { "csi.storage.k8s.io/pod.name": "db-0", "csi.storage.k8s.io/serviceAccount.tokens": STRIPPED });
    assert.doesNotMatch(JSON.stringify(out), /hunter2/);
  });

  test("CreateVolume: secrets keys kept, values stripped, nothing else touched", () => {
    const req = createVolumeRequest();
    const out = redactSecrets(req) as ReturnType<typeof createVolumeRequest>;
    const { secrets: _s, ...rest } = createVolumeRequest();
    const { secrets, ...outRest } = out;
    assert.deepEqual(secrets, { password: STRIPPED, "user.name": STRIPPED });
    assert.deepEqual(outRest, rest);
    assert.doesNotMatch(JSON.stringify(out), /hunter2/);
  });

  test("the input is not mutated (deep-equal before/after, and frozen input works)", () => {
    const req = createVolumeRequest();
    const before = structuredClone(req);
    redactSecrets(req);
    assert.deepEqual(req, before);
    assert.equal(req.secrets.password, SECRET);

    const frozen = deepFreeze(createVolumeRequest());
    const out = redactSecrets(frozen) as { secrets: Record<string, string> };
    assert.equal(out.secrets.password, STRIPPED);
    assert.equal(frozen.secrets.password, SECRET);
  });

  test("the result is a copy: nested objects are not shared with the input", () => {
    const req = createVolumeRequest();
    const out = redactSecrets(req) as ReturnType<typeof createVolumeRequest>;
    assert.notEqual(out, req);
    assert.notEqual(out.secrets, req.secrets);
    assert.notEqual(out.capacity_range, req.capacity_range);
    assert.notEqual(out.volume_capabilities, req.volume_capabilities);
  });

  const secretFields = ["secrets", "controller_publish_secrets", "node_stage_secrets", "node_publish_secrets"];
  for (const field of secretFields) {
    test(`top-level ${field} is stripped`, () => {
      const req = { volume_id: "v1", [field]: { token: SECRET, ca: "-----BEGIN hunter2-----" } };
      const out = redactSecrets(req);
      assert.deepEqual(out, { volume_id: "v1", [field]: { token: STRIPPED, ca: STRIPPED } });
      assert.doesNotMatch(JSON.stringify(out), /hunter2/);
    });
  }

  const nested: Array<[string, unknown, unknown]> = [
    [
      "secrets inside a nested object",
      { outer: { inner: { secrets: { password: SECRET } }, keep: 1 } },
      { outer: { inner: { secrets: { password: STRIPPED } }, keep: 1 } },
    ],
    [
      "secrets inside array elements",
      { requests: [{ secrets: { a: SECRET } }, { secrets: { b: SECRET } }, { other: SECRET }] },
      { requests: [{ secrets: { a: STRIPPED } }, { secrets: { b: STRIPPED } }, { other: SECRET }] },
    ],
    ["top-level array of requests", [{ secrets: { a: SECRET } }, 3, "x", null], [{ secrets: { a: STRIPPED } }, 3, "x", null]],
    ["empty secrets map", { secrets: {} }, { secrets: {} }],
    ["secrets map whose values are objects", { secrets: { nested: { password: SECRET } } }, { secrets: { nested: STRIPPED } }],
    [
      "secret fields at several levels at once",
      { secrets: { p: SECRET }, req: { node_stage_secrets: { q: SECRET }, deeper: [{ node_publish_secrets: { r: SECRET } }] } },
      { secrets: { p: STRIPPED }, req: { node_stage_secrets: { q: STRIPPED }, deeper: [{ node_publish_secrets: { r: STRIPPED } }] } },
    ],
  ];
  for (const [label, input, want] of nested) {
    test(label, () => {
      const before = structuredClone(input);
      const out = redactSecrets(input);
      assert.deepEqual(out, want);
      assert.deepEqual(input, before, "input mutated");
    });
  }

  test("secrets 5 levels deep are stripped", () => {
    const input = { a: { b: { c: { d: { e: { secrets: { password: SECRET } } } } } } };
    const out = redactSecrets(input);
    assert.doesNotMatch(JSON.stringify(out), /hunter2/);
    assert.deepEqual(out, { a: { b: { c: { d: { e: { secrets: { password: STRIPPED } } } } } } });
  });
});

describe("redactSecrets leaves non-secret values alone", () => {
  const passthrough: Array<[string, unknown]> = [
    ["null", null],
    ["undefined", undefined],
    ["a string", "secrets"],
    ["a number", 42],
    ["a boolean", false],
    ["an object without secrets", { name: "n", parameters: { password: "p" }, list: [1, "2", { x: null }] }],
    ["a field merely named like a secret", { secret: "s", my_secrets_count: 3, Secrets: { a: "b" } }],
  ];
  for (const [label, v] of passthrough) {
    test(label, () => {
      assert.deepEqual(redactSecrets(v), v);
    });
  }

  test("Buffers are summarised, not dumped", () => {
    assert.equal(redactSecrets(Buffer.from("hunter2")), "<7 bytes>");
    assert.deepEqual(redactSecrets({ data: Buffer.alloc(3) }), { data: "<3 bytes>" });
  });

  test("a null secrets field stays null", () => {
    assert.deepEqual(redactSecrets({ secrets: null, name: "n" }), { secrets: null, name: "n" });
  });
});

describe("redactSecrets edge cases", () => {
  test("a secrets map nested deeper than the walk limit is not returned in clear", () => {
    let deep: Record<string, unknown> = { secrets: { password: SECRET } };
    for (let i = 0; i < 12; i++) deep = { inner: deep };
    assert.ok(!JSON.stringify(redactSecrets(deep)).includes(SECRET));
  });

  test("a secret field that is not a map is stripped too", () => {
    assert.deepEqual(redactSecrets({ secrets: SECRET, name: "x" }), { secrets: STRIPPED, name: "x" });
  });
});
