/**
 * The order in which the node-agent checks a Node call (services/node-agent/src/rpc/node.ts,
 * NODE_CHECKS), as the CSI spec's error tables give it: a missing required field is
 * INVALID_ARGUMENT, then an unknown volume (or one that is not at the given path) is NOT_FOUND,
 * then the remaining arguments (paths, capability) are INVALID_ARGUMENT, then a missing staging
 * path on publish is FAILED_PRECONDITION. Every RPC over gRPC against the real agent process, and
 * the NATS node work through the same function (runWork) on a real NodeService. None of the
 * refused calls may change anything on the machine.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { DriverError, grpcCodeOf, nodeWorkSubjects } from "@csi/contracts";
import { claimChecker, NodeService, NodeState, Reporter, runWork, StateFile, type Work } from "@csi/node-agent/testing";
import { createLogger, loadClusters } from "@csi/runtime";

type PathWork = Exclude<Work, { op: "limits" }>;

import { blockCap, codeOf, FS_MIN_BYTES, loopsUnder, MiB, mountCap, mountsLeftUnder, NodeStack, type PublishedVolume, ROOT, whyNoDevices } from "@csi/testkit";

const skip = whyNoDevices();
const [OK, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION] = [0, 3, 5, 9];
/** A well-formed volume id of the configured cluster and pool whose image does not exist. */
const GHOST = `0001-0002-c1-0000000000000001-${randomUUID()}`;
const RELATIVE = "some/path"; // what csi-sanity sends

let s: NodeStack;
let vol: PublishedVolume; // exists, never staged
let blk: PublishedVolume; // staged (block) at blkStaging
let blkStaging = "";
let never = ""; // a valid path nothing may ever create

/**
 * What a refused call could have changed: loop devices of the test's pools, mounts under the
 * test's directory and under the agent's working directory (where a relative path would land),
 * and whether the relative path or `never` exists. (Other test files run beside this one, so
 * mounts elsewhere on the machine come and go.)
 */
const machine = async () => ({
  loops: (await loopsUnder(s.root)).map((l) => l.device).sort(),
  mounts: [...(await mountsLeftUnder(s.root)), ...(await mountsLeftUnder(ROOT))].map((m) => m.mountPoint),
  made: [path.join(ROOT, RELATIVE), path.dirname(never)].filter((p) => existsSync(p)),
});

describe("Node calls are checked in the spec's order", { skip }, () => {
  before(async () => {
    s = await NodeStack.start();
    never = path.join(s.root, "kubelet", "never", "made"); // its parent does not exist either
    vol = await s.createAndPublish("pvc-order-vol", mountCap(), FS_MIN_BYTES);
    blk = await s.createAndPublish("pvc-order-blk", blockCap(), 8 * MiB);
    blkStaging = s.kubelet("plugins", "staging", blk.uuid);
    await s.node.NodeStageVolume({ volume_id: blk.id, staging_target_path: blkStaging, volume_capability: blockCap(), publish_context: blk.ctx });
  });

  after(async () => {
    await s?.node.NodeUnstageVolume({ volume_id: blk.id, staging_target_path: blkStaging }).catch(() => {});
    await s?.stop();
  });

  test("gRPC: every Node RPC answers the code of its first failed check", async () => {
    const n = s.node;
    const cap = mountCap();
    const badFs = mountCap("SINGLE_NODE_WRITER", "btrfs");
    const cases: [string, () => Promise<unknown>, number][] = [
      // NodeStageVolume
      ["stage: no volume_id (and a relative path)", () => n.NodeStageVolume({ staging_target_path: RELATIVE, volume_capability: cap }), INVALID_ARGUMENT],
      ["stage: no staging_target_path", () => n.NodeStageVolume({ volume_id: GHOST, volume_capability: cap }), INVALID_ARGUMENT],
      ["stage: no volume_capability (unknown volume)", () => n.NodeStageVolume({ volume_id: GHOST, staging_target_path: never }), INVALID_ARGUMENT],
      [
        "stage: a capability without access mode",
        () => n.NodeStageVolume({ volume_id: GHOST, staging_target_path: never, volume_capability: { mount: {} } }),
        INVALID_ARGUMENT,
      ],
      ["stage: unknown volume, relative path", () => n.NodeStageVolume({ volume_id: GHOST, staging_target_path: RELATIVE, volume_capability: cap }), NOT_FOUND],
      [
        "stage: unknown volume, unsupported filesystem",
        () => n.NodeStageVolume({ volume_id: GHOST, staging_target_path: never, volume_capability: badFs }),
        NOT_FOUND,
      ],
      ["stage: malformed volume id", () => n.NodeStageVolume({ volume_id: "some-vol-id", staging_target_path: never, volume_capability: cap }), NOT_FOUND],
      [
        "stage: unknown volume, hostile image name",
        () => n.NodeStageVolume({ volume_id: GHOST, staging_target_path: never, volume_capability: cap, publish_context: { imageName: "../../etc/passwd" } }),
        NOT_FOUND,
      ],
      [
        "stage: existing volume, another image's name",
        () =>
          n.NodeStageVolume({
            volume_id: vol.id,
            staging_target_path: never,
            volume_capability: cap,
            publish_context: { ...vol.ctx, imageName: blk.ctx.imageName as string },
          }),
        INVALID_ARGUMENT,
      ],
      [
        "stage: existing volume, a path under /proc",
        () => n.NodeStageVolume({ volume_id: vol.id, staging_target_path: "/proc/x/y", volume_capability: cap, publish_context: vol.ctx }),
        INVALID_ARGUMENT,
      ],
      [
        "stage: existing volume, relative path",
        () => n.NodeStageVolume({ volume_id: vol.id, staging_target_path: RELATIVE, volume_capability: cap, publish_context: vol.ctx }),
        INVALID_ARGUMENT,
      ],
      [
        "stage: existing volume, a path with ..",
        () => n.NodeStageVolume({ volume_id: vol.id, staging_target_path: `${s.root}/../../etc`, volume_capability: cap, publish_context: vol.ctx }),
        INVALID_ARGUMENT,
      ],
      [
        "stage: existing volume, unsupported filesystem",
        () => n.NodeStageVolume({ volume_id: vol.id, staging_target_path: never, volume_capability: badFs, publish_context: vol.ctx }),
        INVALID_ARGUMENT,
      ],
      // NodePublishVolume
      ["publish: no volume_id", () => n.NodePublishVolume({ staging_target_path: never, target_path: never, volume_capability: cap }), INVALID_ARGUMENT],
      ["publish: no target_path", () => n.NodePublishVolume({ volume_id: vol.id, staging_target_path: never, volume_capability: cap }), INVALID_ARGUMENT],
      ["publish: no volume_capability (nor staging path)", () => n.NodePublishVolume({ volume_id: GHOST, target_path: never }), INVALID_ARGUMENT],
      [
        "publish: unknown volume, relative target",
        () => n.NodePublishVolume({ volume_id: GHOST, staging_target_path: never, target_path: RELATIVE, volume_capability: cap }),
        NOT_FOUND,
      ],
      [
        "publish: existing volume, relative target",
        () => n.NodePublishVolume({ volume_id: vol.id, staging_target_path: never, target_path: RELATIVE, volume_capability: cap, publish_context: vol.ctx }),
        INVALID_ARGUMENT,
      ],
      [
        "publish: existing volume, no staging_target_path",
        () => n.NodePublishVolume({ volume_id: vol.id, target_path: never, volume_capability: cap, publish_context: vol.ctx }),
        FAILED_PRECONDITION,
      ],
      [
        "publish: existing volume, not staged",
        () => n.NodePublishVolume({ volume_id: vol.id, staging_target_path: never, target_path: never, volume_capability: cap, publish_context: vol.ctx }),
        FAILED_PRECONDITION,
      ],
      // NodeUnpublishVolume / NodeUnstageVolume: an unknown volume has nothing to undo (OK), but paths are still checked.
      ["unpublish: no volume_id", () => n.NodeUnpublishVolume({ target_path: never }), INVALID_ARGUMENT],
      ["unpublish: no target_path", () => n.NodeUnpublishVolume({ volume_id: GHOST }), INVALID_ARGUMENT],
      ["unpublish: relative target", () => n.NodeUnpublishVolume({ volume_id: GHOST, target_path: RELATIVE }), INVALID_ARGUMENT],
      ["unpublish: unknown volume", () => n.NodeUnpublishVolume({ volume_id: GHOST, target_path: never }), OK],
      ["unstage: no volume_id", () => n.NodeUnstageVolume({ staging_target_path: never }), INVALID_ARGUMENT],
      ["unstage: no staging_target_path", () => n.NodeUnstageVolume({ volume_id: GHOST }), INVALID_ARGUMENT],
      ["unstage: relative path", () => n.NodeUnstageVolume({ volume_id: GHOST, staging_target_path: RELATIVE }), INVALID_ARGUMENT],
      ["unstage: unknown volume", () => n.NodeUnstageVolume({ volume_id: GHOST, staging_target_path: never }), OK],
      // NodeExpandVolume
      ["expand: no volume_id", () => n.NodeExpandVolume({ volume_path: RELATIVE }), INVALID_ARGUMENT],
      ["expand: no volume_path", () => n.NodeExpandVolume({ volume_id: vol.id }), INVALID_ARGUMENT],
      ["expand: unknown volume at some/path", () => n.NodeExpandVolume({ volume_id: GHOST, volume_path: RELATIVE }), NOT_FOUND],
      ["expand: staged volume at some/path", () => n.NodeExpandVolume({ volume_id: blk.id, volume_path: RELATIVE }), NOT_FOUND],
      ["expand: staged volume, where it is not", () => n.NodeExpandVolume({ volume_id: blk.id, volume_path: never }), NOT_FOUND],
      ["expand: a volume not staged here", () => n.NodeExpandVolume({ volume_id: vol.id, volume_path: blkStaging }), NOT_FOUND],
      [
        "expand: staged volume at its path, unsupported capability",
        () => n.NodeExpandVolume({ volume_id: blk.id, volume_path: blkStaging, volume_capability: badFs }),
        INVALID_ARGUMENT,
      ],
      // NodeGetVolumeStats
      ["stats: no volume_id", () => n.NodeGetVolumeStats({ volume_path: RELATIVE }), INVALID_ARGUMENT],
      ["stats: no volume_path", () => n.NodeGetVolumeStats({ volume_id: GHOST }), INVALID_ARGUMENT],
      ["stats: unknown volume at some/path", () => n.NodeGetVolumeStats({ volume_id: GHOST, volume_path: RELATIVE }), NOT_FOUND],
      ["stats: staged volume at some/path", () => n.NodeGetVolumeStats({ volume_id: blk.id, volume_path: RELATIVE }), NOT_FOUND],
      ["stats: staged volume, where it is not", () => n.NodeGetVolumeStats({ volume_id: blk.id, volume_path: never }), NOT_FOUND],
      ["stats: staged volume at its path", () => n.NodeGetVolumeStats({ volume_id: blk.id, volume_path: blkStaging }), OK],
      ["stats: staged volume at its path, written unclean", () => n.NodeGetVolumeStats({ volume_id: blk.id, volume_path: `${blkStaging}//` }), OK],
    ];
    const before = await machine();
    const wrong: string[] = [];
    for (const [what, call, want] of cases) {
      const got = await codeOf(call());
      if (got !== want) wrong.push(`${what}: got ${got}, want ${want}`);
    }
    assert.deepEqual(wrong, []);
    assert.deepEqual(await machine(), before, "no refused call attached, mounted or made anything");
    assert.deepEqual(before.made, []);
  });

  test("NATS work: the same checks through runWork, the same codes", async () => {
    const log = createLogger("node-agent-test", "silent");
    const nodeId = "node-in-process";
    const reporter = new Reporter(s.nc, nodeId, log);
    const svc = new NodeService({
      nodeId,
      clusters: loadClusters(s.clustersFile, s.root),
      stateFile: new StateFile(path.join(s.root, "in-process", "state.json"), NodeState),
      reporter,
      log,
    });
    await svc.load();
    const capability = { accessType: "mount" as const, accessMode: "SINGLE_NODE_WRITER" as const };
    const work = (over: Partial<PathWork>): PathWork => ({
      id: randomUUID(),
      nodeId,
      op: "stage",
      volumeId: GHOST,
      stagingPath: never,
      capability,
      readOnly: false,
      publishContext: {},
      ...over,
    });
    const existing = { volumeId: vol.id, publishContext: vol.ctx };
    const cases: [string, PathWork, number][] = [
      ["stage: no volumeId (and a relative path)", work({ volumeId: "", stagingPath: RELATIVE }), INVALID_ARGUMENT],
      ["stage: no stagingPath", work({ stagingPath: "" }), INVALID_ARGUMENT],
      ["stage: unknown volume, relative path", work({ stagingPath: RELATIVE }), NOT_FOUND],
      ["stage: existing volume, relative path", work({ ...existing, stagingPath: RELATIVE }), INVALID_ARGUMENT],
      ["stage: existing volume, unsupported filesystem", work({ ...existing, capability: { ...capability, fsType: "btrfs" } }), INVALID_ARGUMENT],
      ["publish: no targetPath", work({ op: "publish" }), INVALID_ARGUMENT],
      ["publish: unknown volume, relative target", work({ op: "publish", targetPath: RELATIVE }), NOT_FOUND],
      ["publish: existing volume, relative target", work({ op: "publish", ...existing, targetPath: RELATIVE }), INVALID_ARGUMENT],
      ["publish: existing volume, not staged", work({ op: "publish", ...existing, targetPath: never }), FAILED_PRECONDITION],
      ["unpublish: relative target", work({ op: "unpublish", targetPath: RELATIVE }), INVALID_ARGUMENT],
      ["unpublish: unknown volume", work({ op: "unpublish", targetPath: never }), OK],
      ["unstage: relative path", work({ op: "unstage", stagingPath: RELATIVE }), INVALID_ARGUMENT],
      ["unstage: unknown volume", work({ op: "unstage" }), OK],
    ];
    const before = await machine();
    const wrong: string[] = [];
    try {
      for (const [what, w, want] of cases) {
        const got = await runWork(svc, w, { nodeId, subject: nodeWorkSubjects.forNode(nodeId), claimed: claimChecker(s.nc, nodeId) }).then(
          () => OK,
          (err: unknown) => (err instanceof DriverError ? grpcCodeOf(err.code) : -1),
        );
        if (got !== want) wrong.push(`${what}: got ${got}, want ${want}`);
      }
    } finally {
      await reporter.flush();
      reporter.stop();
    }
    assert.deepEqual(wrong, []);
    assert.deepEqual(await machine(), before, "no refused work attached, mounted or made anything");
    assert.deepEqual(before.made, []);
  });
});
