/**
 * Group snapshots (CSI GroupController): snapshots of several volumes cut together, under the
 * group name's lock and every source volume's lock. Each member is a snapshot record of its
 * own (restorable like any snapshot) that names its group. Pure decisions:
 *
 *   new           nothing reserved under this name
 *   reuse         the group was made (GroupSnapshotCreated): answer it
 *   complete      reserved and every member cut, but not every cut recorded (the writer died
 *                 between the cuts and their events): record them and answer
 *   stale         reserved but not every member was cut: undo the whole group and cut afresh, so
 *                 that no group mixes cuts taken at different times
 *   conflict      the name holds a group of other source volumes or parameters: AlreadyExists
 *   inconsistent  the directory and the record disagree on the name
 */
import type { GroupMember } from "@csi/contracts";
import type { ImageInfo } from "./pool-backend.js";
import type { GroupRecord, Hash, SnapshotRecord } from "./records.js";
import { digestOf, sameSet, type Verdict } from "./reservation.js";

/** One member as read under the lock: its snapshot record (if any) and its image (if cut). */
export interface MemberState {
  member: GroupMember;
  hash?: Hash;
  record?: SnapshotRecord;
  image?: ImageInfo;
}

export interface GroupState {
  record: GroupRecord;
  members: MemberState[];
}

/** Completing a group records the members that were cut but not recorded. */
export type GroupVerdict = Verdict<GroupState, { cut: MemberState[] }>;

/** What makes two group creates "the same": the set of source volumes (any order) and the parameters. */
export function groupDigest(sourceUuids: string[], parameters: Record<string, string>): string {
  return digestOf({ sources: [...sourceUuids].sort(), parameters });
}

export function checkGroupReservation(
  ask: { name: string; sourceUuids: string[]; digest: string },
  dirUuid: string | undefined,
  state: GroupState | undefined,
): GroupVerdict {
  if (!dirUuid) return { kind: "new" };
  if (!state) return { kind: "stale", uuid: dirUuid, reason: "the group record is missing" };
  const { record, members } = state;
  if (record.name !== ask.name) {
    return { kind: "inconsistent", reason: `name directory points ${ask.name} at ${dirUuid}, whose record names ${record.name}` };
  }
  // Other members or parameters are a conflict whatever state the group is in (as for snapshots).
  if (
    !sameSet(
      record.members.map((m) => m.volumeUuid),
      ask.sourceUuids,
    )
  ) {
    return { kind: "conflict", reason: `group snapshot ${ask.name} exists for other source volumes` };
  }
  if (record.digest !== ask.digest) return { kind: "conflict", reason: `group snapshot ${ask.name} exists with other parameters` };
  const unrecorded = members.filter((m) => !m.record?.imageId);
  if (record.ready && unrecorded.length === 0) return { kind: "reuse", record: state };
  if (members.every((m) => m.record && m.image)) return { kind: "complete", record: state, cut: unrecorded };
  // Made once, a member lost since (its image removed behind our back, a delete cut short): as it is.
  if (record.ready) return { kind: "reuse", record: state };
  const missing = members.filter((m) => !m.record || !m.image).map((m) => m.member.volumeUuid);
  return { kind: "stale", uuid: dirUuid, record: state, reason: `not every member was cut (volumes ${missing.join(", ")})` };
}

/** Why a caller's list of snapshot ids is not the group's members (CSI's snapshot_ids check); undefined when it is, or when none was given. */
export function membersMismatch(record: GroupRecord, snapshotUuids: string[] | undefined): string | undefined {
  if (!snapshotUuids?.length) return undefined;
  const have = record.members.map((m) => m.snapshotUuid);
  return sameSet(have, snapshotUuids) ? undefined : `snapshot ids do not match the ${have.length} snapshots of group snapshot ${record.uuid}`;
}

/** The pool a group is cut in: every source volume's, which must be one (a group is cut in one pool). */
export function groupPool(sources: { uuid: string; pool: string }[]): { pool: string } | { refused: string } {
  const pools = [...new Set(sources.map((s) => s.pool))];
  if (pools.length === 1 && pools[0]) return { pool: pools[0] };
  return { refused: `the source volumes are in several pools (${pools.sort().join(", ")}): a group snapshot is cut in one pool` };
}
