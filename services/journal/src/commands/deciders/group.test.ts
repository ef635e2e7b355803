/** Group snapshot decisions: given what is reserved and cut, when a create comes, then the verdict. */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { GroupRecord, SnapshotRecord } from "../../fold/records.js";
import type { ImageInfo } from "../../pools/port.js";
import { checkGroupReservation, type GroupState, groupDigest, groupPool, type MemberState, membersMismatch } from "./group.js";

const G = "0b7c4f5e-3a0b-4a52-8d3e-2f9b1c6d7e80";
const V1 = "11111111-1111-4111-8111-111111111111";
const V2 = "22222222-2222-4222-8222-222222222222";
const S1 = "33333333-3333-4333-8333-333333333333";
const S2 = "44444444-4444-4444-8444-444444444444";
const digest = groupDigest([V1, V2], {});
const ask = { name: "grp", sourceUuids: [V2, V1], digest };
const group = (more: Partial<GroupRecord> = {}): GroupRecord => ({
  uuid: G,
  name: "grp",
  pool: "default",
  poolId: 1,
  digest,
  createdAt: "t",
  ready: true,
  seq: 9,
  members: [
    { volumeUuid: V1, snapshotUuid: S1 },
    { volumeUuid: V2, snapshotUuid: S2 },
  ],
  ...more,
});
const snap = (uuid: string, imageId = "ab"): SnapshotRecord => ({
  uuid,
  name: "grp",
  pool: "default",
  poolId: 1,
  imageName: `csi-snap-${uuid}`,
  imageId,
  digest,
  createdAt: "t",
  seq: 3,
  sourceUuid: V1,
  sizeBytes: 1,
  groupSnapshotUuid: G,
});
const img = (uuid: string): ImageInfo => ({ name: `csi-snap-${uuid}`, id: "ab", sizeBytes: 1, readOnly: true });
/** A member: "recorded" (record + image), "cut" (reserved, image made, not recorded), "reserved" (no image), "none". */
type How = "recorded" | "cut" | "reserved" | "none";
const m = (volumeUuid: string, snapshotUuid: string, how: How): MemberState => ({
  member: { volumeUuid, snapshotUuid },
  ...(how === "none" ? {} : { record: snap(snapshotUuid, how === "recorded" ? "ab" : "") }),
  ...(how === "recorded" || how === "cut" ? { image: img(snapshotUuid) } : {}),
});
const state = (r: GroupRecord, a: How, b: How): GroupState => ({
  record: r,
  members: [m(V1, S1, a), m(V2, S2, b)],
});

const table: [string, typeof ask, string | undefined, GroupState | undefined, string][] = [
  ["nothing reserved under the name", ask, undefined, undefined, "new"],
  ["the group was made (sources in another order)", ask, G, state(group(), "recorded", "recorded"), "reuse"],
  ["other source volumes", { ...ask, sourceUuids: [V1] }, G, state(group(), "recorded", "recorded"), "conflict"],
  ["other source volumes, group half made", { ...ask, sourceUuids: [V1] }, G, state(group({ ready: false }), "reserved", "none"), "conflict"],
  ["other parameters", { ...ask, digest: groupDigest([V1, V2], { a: "b" }) }, G, state(group(), "recorded", "recorded"), "conflict"],
  ["the group record is missing", ask, G, undefined, "stale"],
  ["directory and record disagree", ask, G, state(group({ name: "other" }), "recorded", "recorded"), "inconsistent"],
  ["every member cut, none recorded (writer died before its events)", ask, G, state(group({ ready: false }), "cut", "cut"), "complete"],
  ["every member cut, one recorded", ask, G, state(group({ ready: false }), "recorded", "cut"), "complete"],
  ["group recorded, one member's event missing (a partial batch)", ask, G, state(group(), "recorded", "cut"), "complete"],
  ["one member not cut: undo it all, no group mixes two moments", ask, G, state(group({ ready: false }), "cut", "reserved"), "stale"],
  ["members never reserved", ask, G, state(group({ ready: false }), "none", "none"), "stale"],
  ["made once, a member lost since: answered as it is", ask, G, state(group(), "recorded", "reserved"), "reuse"],
];

for (const [name, a, dir, s, want] of table) {
  test(`group reservation: ${name} → ${want}`, () => assert.equal(checkGroupReservation(a, dir, s).kind, want));
}

test("group reservation: complete records exactly the members cut but not recorded", () => {
  const v = checkGroupReservation(ask, G, state(group({ ready: false }), "recorded", "cut"));
  assert.equal(v.kind, "complete");
  assert.deepEqual(v.kind === "complete" ? v.cut.map((c) => c.member.snapshotUuid) : [], [S2]);
});

test("snapshot ids: none given is no check; the members in any order match; anything else is a mismatch", () => {
  assert.equal(membersMismatch(group(), undefined), undefined);
  assert.equal(membersMismatch(group(), []), undefined);
  assert.equal(membersMismatch(group(), [S2, S1]), undefined);
  assert.match(membersMismatch(group(), [S1]) ?? "", /do not match the 2 snapshots/);
  assert.match(membersMismatch(group(), [S1, S2, G]) ?? "", /do not match/);
});

test("a group is cut in one pool: the sources' pool, or refused", () => {
  assert.deepEqual(
    groupPool([
      { uuid: V1, pool: "fast" },
      { uuid: V2, pool: "fast" },
    ]),
    { pool: "fast" },
  );
  assert.deepEqual(
    groupPool([
      { uuid: V1, pool: "fast" },
      { uuid: V2, pool: "default" },
    ]),
    { refused: "the source volumes are in several pools (default, fast): a group snapshot is cut in one pool" },
  );
});

test("the digest ignores the order of the sources", () => {
  assert.equal(groupDigest([V2, V1], {}), groupDigest([V1, V2], {}));
  assert.notEqual(groupDigest([V1], {}), groupDigest([V1, V2], {}));
});
