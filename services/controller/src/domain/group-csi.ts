/** Pure translation of group snapshots between the journal's contract and CSI's GroupController messages. */
import { composeVolumeId, type GroupSnapshotView } from "@csi/contracts";
import type { ResponseOf } from "@csi/runtime";
import { csiSnapshot, timestamp } from "./csi.js";

type VolumeGroupSnapshotMsg = NonNullable<ResponseOf<"GroupController", "GetVolumeGroupSnapshot">["group_snapshot"]>;

/** A group's id uses the volume-id codec, with its members' pool id (a group is cut in one pool). */
export function csiGroupSnapshot(clusterID: string, g: GroupSnapshotView): VolumeGroupSnapshotMsg {
  return {
    group_snapshot_id: composeVolumeId({ clusterID, poolID: g.poolId, uuid: g.uuid }),
    snapshots: g.snapshots.map((s) => csiSnapshot(clusterID, s)),
    creation_time: timestamp(g.createdAt),
    ready_to_use: g.readyToUse,
  };
}
