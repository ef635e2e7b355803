import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Clusters, composeVolumeId, type DriverError, MAX_PAGE_ENTRIES, type VolumeView } from "@csi/contracts";
import { confirmCapabilities, contentSourceOf, letGoOf, locateId, maxEntriesOf, RECORDED_CONDITION, volumeStatus } from "./csi.js";

const code = (f: () => unknown) => {
  try {
    f();
    return "OK";
  } catch (e) {
    return (e as DriverError).code;
  }
};

describe("max_entries", () => {
  test("negative refused, past the cap clamped", () => {
    assert.equal(
      code(() => maxEntriesOf(-1)),
      "InvalidArgument",
    );
    assert.equal(maxEntriesOf(2 ** 31 - 1), MAX_PAGE_ENTRIES);
    assert.equal(maxEntriesOf(0), 0);
  });
});

describe("locateId: an id names something of ours only in a known cluster and pool", () => {
  const east = { clusterID: "east", instance: "default", defaultPool: "a", pools: [{ name: "a", id: 1, root: "/a" }] };
  const clusters: Clusters = { defaultCluster: "east", clusters: [east], get: (id) => (id === "east" ? east : undefined) };
  const UUID = "6b131693-8210-4b03-acc4-9acebba04e87";
  const cases: [string, string, boolean][] = [
    ["a known cluster and pool", composeVolumeId({ clusterID: "east", poolID: 1, uuid: UUID }), true],
    ["a pool id the cluster does not have", composeVolumeId({ clusterID: "east", poolID: 2, uuid: UUID }), false],
    ["a cluster we do not know", composeVolumeId({ clusterID: "west", poolID: 1, uuid: UUID }), false],
    ["an id that does not decode", "not-an-id", false],
  ];
  for (const [name, id, found] of cases) test(name, () => assert.equal(locateId(clusters, id)?.parts.uuid === UUID, found));
});

describe("contentSourceOf", () => {
  const cases: [string, Parameters<typeof contentSourceOf>[0], ReturnType<typeof contentSourceOf>][] = [
    ["none", null, undefined],
    ["neither kind set", {}, undefined],
    ["a snapshot", { snapshot: { snapshot_id: "s" } }, { kind: "snapshot", id: "s" }],
    ["a volume", { volume: { volume_id: "v" } }, { kind: "volume", id: "v" }],
    ["a kind without an id (placement says INVALID_ARGUMENT)", { volume: { volume_id: "" } }, { kind: "volume", id: "" }],
  ];
  for (const [name, cs, want] of cases) test(name, () => assert.deepEqual(contentSourceOf(cs), want));
});

describe("confirmCapabilities", () => {
  const v = { parameters: { fs: "xfs" } } as unknown as VolumeView;
  const mount = { accessType: "mount", accessMode: "SINGLE_NODE_WRITER" } as const;
  const ask = (parameters: Record<string, string>, mutable: Record<string, string> = {}) =>
    ({ volume_id: "x", volume_capabilities: [], parameters, mutable_parameters: mutable, volume_context: {}, secrets: {} }) as never;
  test("the volume's parameters and valid I/O limits are confirmed", () => {
    assert.notEqual(confirmCapabilities(v, [mount], ask({ fs: "xfs", readIOPS: "100" })).confirmed, null);
  });
  test("another parameter value is not, and says which", () => {
    const r = confirmCapabilities(v, [mount], ask({ fs: "ext4" }));
    assert.equal(r.confirmed, null);
    assert.match(r.message ?? "", /"fs" differs/);
  });
  test("a capability we do not serve is not", () => {
    assert.equal(confirmCapabilities(v, [{ accessType: "mount", accessMode: "MULTI_NODE_MULTI_WRITER" }], ask({})).confirmed, null);
  });
});

describe("volumeStatus: ControllerGetVolume's and every ListVolumes entry's (VOLUME_CONDITION is advertised: always a condition)", () => {
  const claims = [{ nodeId: "n1", accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false }];
  test("the journal's condition as it said it: a missing image is abnormal with its message", () => {
    const condition = { abnormal: true, message: "image csi-vol-x is missing from pool default" };
    assert.deepEqual(volumeStatus({ claims, condition } as unknown as VolumeView), { published_node_ids: ["n1"], volume_condition: condition });
  });
  test("a reply without one (volume.list checks no image): normal, saying what it rests on", () => {
    const status = volumeStatus({ claims: [] } as unknown as VolumeView);
    assert.deepEqual(status, { published_node_ids: [], volume_condition: RECORDED_CONDITION });
    assert.equal(status.volume_condition.abnormal, false);
    assert.match(status.volume_condition.message, /^ok: /);
  });
});

test("letGoOf: every released node with the volume staged is asked to let go, whatever its (possibly late) reports say of targets", () => {
  const capability = { accessType: "mount", accessMode: "SINGLE_NODE_WRITER" } as const;
  const held = [
    { nodeId: "n1", staged: "/s/1", published: [], capability },
    // Its "unpublished" report not yet appended (Swarm's ControllerUnpublish right after NodeUnpublish): asked all the same; the node refuses by its own state if a target is still there.
    { nodeId: "n2", staged: "/s/2", published: ["/t/2"], capability },
    { nodeId: "n3", published: ["/t/3"], capability }, // not staged: nothing to let go of
    { nodeId: "n4", staged: "/s/4", published: [] }, // no capability known: cannot be asked
  ];
  assert.deepEqual(
    letGoOf(held).map((h) => `${h.nodeId} ${h.staged}`),
    ["n1 /s/1", "n2 /s/2"],
  );
});
