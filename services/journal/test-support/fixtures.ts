/**
 * Events for tests and the bench (evolve, projection, audit; test/audit.test.ts plants a
 * reservation, bench/replay.ts writes a log): one volume, a snapshot of it, a group snapshot,
 * with stream sequences handed out in order. Not used by the service itself.
 */
import type { EventBody, ForeignReason, JournalEvent, StoredEvent } from "@csi/contracts";
import type { Address } from "../src/fold/evolve.js";
import type { ForeignRecord } from "../src/log/records.js";

export const VOL = "36eaa70e-eb63-11ea-8e79-246e96907f74";
export const SNAP = "4f2b2a52-0d4e-4a43-9d0c-6a1cb0ad5f10";
export const GRP = "9d3c7f1e-5b2a-4c8d-9e6f-1a2b3c4d5e6f";
export const T0 = "2026-01-01T00:00:00.000Z";

/** A volume's reservation in pool "default" (id 1) of instance "default", its image named after its uuid. */
export function volumeReservedBody(uuid: string, name: string, more: Record<string, unknown> = {}): EventBody {
  return {
    type: "VolumeReserved",
    uuid,
    name,
    instance: "default",
    pool: "default",
    poolId: 1,
    imageName: `csi-vol-${uuid}`,
    sizeBytes: 1048576,
    digest: "d",
    parameters: {},
    capabilities: [],
    ...more,
  } as EventBody;
}

/** Makes stored events with increasing sequences (each call of `events()` starts at 1). */
export function events(start = 0) {
  let seq = start;
  const meta = { v: 1 as const, requestId: "r", actor: { service: "journal", replica: "t" } };
  const at = (e: Record<string, unknown>, time = T0): StoredEvent => ({ seq: ++seq, subject: "s", event: { ...meta, time, ...e } as JournalEvent });
  const pool = { instance: "default", pool: "default", poolId: 1, digest: "d" };
  return {
    at,
    /** A foreign record (log/records.ts) on the subject of `address` (none: a subject of no aggregate). */
    foreign: (address?: Address, reason: ForeignReason = "not-json"): ForeignRecord => ({
      seq: ++seq,
      subject: "s",
      foreign: { reason, detail: "not JSON", bytes: 3, preview: '"{{{"' },
      ...(address ? { address } : {}),
    }),
    get seq() {
      return seq;
    },
    volReserved: (more: Record<string, unknown> = {}, time = T0) =>
      at(
        { type: "VolumeReserved", uuid: VOL, name: "pvc", imageName: `csi-vol-${VOL}`, sizeBytes: 1048576, parameters: {}, capabilities: [], ...pool, ...more },
        time,
      ),
    volCreated: (time = T0) => at({ type: "VolumeCreated", uuid: VOL, imageId: "1a", sizeBytes: 1048576 }, time),
    claimed: (nodeId = "n1") => at({ type: "VolumeClaimed", uuid: VOL, nodeId, accessMode: "SINGLE_NODE_WRITER", accessType: "mount", readOnly: false }),
    unclaimed: (nodeId = "n1") => at({ type: "VolumeUnclaimed", uuid: VOL, nodeId }),
    nameReserved: (kind: string, name: string, uuid: string) => at({ type: "NameReserved", kind, name, uuid }),
    nameReleased: (kind: string, name: string, uuid: string) => at({ type: "NameReleased", kind, name, uuid }),
    snapReserved: (more: Record<string, unknown> = {}, time = T0) =>
      at({ type: "SnapshotReserved", uuid: SNAP, name: "snap", sourceUuid: VOL, imageName: `csi-snap-${SNAP}`, ...pool, ...more }, time),
    snapCreated: (time = T0) => at({ type: "SnapshotCreated", uuid: SNAP, imageId: "2b", sizeBytes: 1048576 }, time),
    groupReserved: (time = T0) =>
      at({ type: "GroupSnapshotReserved", uuid: GRP, name: "grp", ...pool, members: [{ volumeUuid: VOL, snapshotUuid: SNAP }] }, time),
  };
}
