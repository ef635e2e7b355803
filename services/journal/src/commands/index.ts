/**
 * The commands (room door): what other rooms of the journal take from this one — the runner that
 * carries a command through lock, read, decide, write (runner.ts), the reply's budget (reply.ts),
 * the words of a decider (decider.ts), the deciders the command table maps its commands to
 * (deciders/), and what those deciders know that the journal's reads and audit ask too. Nothing
 * behind this file is imported from outside commands/ (test/code-shape.test.ts).
 */
export type { Command, View } from "./decider.js";
export { adoptVolume } from "./deciders/adopt.js";
export { deviceHolds } from "./deciders/devices.js";
export { createGroupSnapshot, deleteGroupSnapshot, groupView, membersMismatch } from "./deciders/group.js";
export { TokenBuckets, whyNotNodesBusiness } from "./deciders/report-bounds.js";
export { nameState, nextToken } from "./deciders/reservation.js";
export { createSnapshot, deleteSnapshot } from "./deciders/snapshots.js";
export { createVolume, deleteVolume, expandVolume, madeIn, modifyVolume, poolOf, publishVolume, recordIn, unpublishVolume } from "./deciders/volumes.js";
export { fitReply } from "./reply.js";
export { type RunnerDeps, run } from "./runner.js";
