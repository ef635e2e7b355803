/**
 * The journal's command table: every command of the contract (packages/contracts/src/journal.ts),
 * one row each, typed by it — its parsed request in, its result out. A write runs its decider
 * (commands/deciders/) through the runner; a read is the journal's or the audit's. The in-process
 * journal (journal.ts) is made from it and the NATS service (rpc/nats-service.ts) serves each row:
 * a new command is a contract entry and one row here.
 */
import type { CommandResult, JournalCommand, ParsedRequest } from "@csi/contracts";
import type { Audit } from "../audit/index.js";
import {
  adoptVolume,
  type Command,
  createGroupSnapshot,
  createSnapshot,
  createVolume,
  deleteGroupSnapshot,
  deleteSnapshot,
  deleteVolume,
  expandVolume,
  modifyVolume,
  publishVolume,
  unpublishVolume,
} from "../commands/index.js";

/** Each command's handler, typed by its contract. */
export type CommandTable = { [C in JournalCommand]: (req: ParsedRequest<C>) => Promise<CommandResult<C>> };

type Read<C extends JournalCommand> = (req: ParsedRequest<C>) => Promise<CommandResult<C>>;

/** What the rows call: the runner, the journal's reads, the audit. */
export interface TableParts {
  run<R>(cmd: Command<R>): Promise<R>;
  readonly audit: Audit;
  getVolume: Read<"volume.get">;
  listVolumes: Read<"volume.list">;
  getSnapshot: Read<"snapshot.get">;
  listSnapshots: Read<"snapshot.list">;
  getGroupSnapshot: Read<"groupsnapshot.get">;
  poolStat: Read<"pool.stat">;
}

/** A command as its request was sent: a resend is run only if no run of it was answered (commands/run-served.ts). */
const sent = <R>(r: { resend?: boolean | undefined }, cmd: Command<R>): Command<R> => (r.resend ? { ...cmd, resend: true } : cmd);

export function commandTable(j: TableParts): CommandTable {
  return {
    "volume.create": (r) => j.run(sent(r, createVolume(r))),
    "volume.adopt": (r) => j.run(sent(r, adoptVolume(r))),
    "volume.delete": (r) => j.run(sent(r, deleteVolume(r))),
    "volume.expand": (r) => j.run(sent(r, expandVolume(r))),
    "volume.modify": (r) => j.run(sent(r, modifyVolume(r))),
    "volume.get": (r) => j.getVolume(r),
    "volume.list": (r) => j.listVolumes(r),
    "volume.publish": (r) => j.run(sent(r, publishVolume(r))),
    "volume.unpublish": (r) => j.run(sent(r, unpublishVolume(r))),
    "snapshot.create": (r) => j.run(sent(r, createSnapshot(r))),
    "snapshot.delete": (r) => j.run(sent(r, deleteSnapshot(r))),
    "snapshot.get": (r) => j.getSnapshot(r),
    "snapshot.list": (r) => j.listSnapshots(r),
    "groupsnapshot.create": (r) => j.run(sent(r, createGroupSnapshot(r))),
    "groupsnapshot.delete": (r) => j.run(sent(r, deleteGroupSnapshot(r))),
    "groupsnapshot.get": (r) => j.getGroupSnapshot(r),
    "pool.stat": (r) => j.poolStat(r),
    "volume.history": (r) => j.audit.history(r),
    "audit.replay": (r) => j.audit.replay(r),
    "audit.verify": (r) => j.audit.verify(r),
    "audit.gc": (r) => j.audit.gc(r),
    "audit.images": (r) => j.audit.images(r),
    "audit.rebuild": (r) => j.audit.rebuild(r),
    "audit.purge": (r) => j.audit.purge(r),
  };
}
