/**
 * The aggregate kinds the journal keeps, spelled one way everywhere ("volume", "snapshot",
 * "groupsnapshot"), and each kind's token in event subjects. The tokens are what existing logs
 * hold on the wire (`csi.<c>.evt.vol.<uuid>`, `csi.<c>.evt.name.snap.…`): they never change.
 */
import { z } from "zod";

export const Kind = z.enum(["volume", "snapshot", "groupsnapshot"]);
export type Kind = z.infer<typeof Kind>;

export const KIND_TOKENS = { volume: "vol", snapshot: "snap", groupsnapshot: "grp" } as const satisfies Record<Kind, string>;
export type KindToken = (typeof KIND_TOKENS)[Kind];
