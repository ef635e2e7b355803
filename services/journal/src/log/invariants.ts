/**
 * The rules every log a journal writes keeps, checked record by record against the states before
 * it, through the one fold (evolve.ts `foldStep`). A restore (`csictl log import` / `log restore`,
 * log/backup/io.ts) replays the whole backup through them before it writes anything, so a
 * backup that no journal could have written — edited by hand or by an attacker who recomputed an
 * unkeyed digest — is refused instead of becoming the source of truth. Pure.
 *
 * The rules (docs/operations.md, "Backup and restore"):
 *   - a record per reservation: a VolumeReserved / SnapshotReserved / GroupSnapshotReserved starts
 *     an aggregate that had no state yet (a journal reserves a fresh uuid, fenced on an empty
 *     subject), and a NameReserved points its name at a uuid with no record yet, or at the live
 *     record of that very name and kind (its reservation may land first);
 *   - unique image names among live records: a volume or snapshot that comes to life names an
 *     image (pool + image name) no other live record names — else deleting one would delete the
 *     other's data while it is still listed.
 * Sequences in order and sizes within the server's max_payload are the file reader's
 * (log/backup/file.ts). Foreign records are not judged: they only move their subject's sequence.
 */
import { type Kind, quote } from "@csi/contracts";
import { type Aggregate, addressKey, foldStep, type States, startsAfresh } from "../fold/evolve.js";
import { isForeign, type LogRecord } from "./records.js";

/** A record that breaks a rule of the log: its sequence and what it breaks. */
export class LogInvariantError extends Error {
  override readonly name = "LogInvariantError";
  constructor(
    readonly seq: number,
    message: string,
  ) {
    super(`sequence ${seq}: ${message}`);
  }
}

/** The image a live volume or snapshot record names, as "<pool>/<image name>". */
function liveImage(s: Aggregate | undefined): string | undefined {
  if ((s?.kind !== "volume" && s?.kind !== "snapshot") || !s.record) return undefined;
  return `${s.record.pool}/${s.record.imageName}`;
}

const what = (s: Aggregate) => (s.kind === "name" ? `name ${quote(s.name)}` : `${s.kind} ${s.uuid}`);

export class LogInvariants {
  readonly #states: States = new Map();
  /** Images of live records: "<pool>/<image name>" → the key of the record that named it. */
  readonly #images = new Map<string, string>();

  /** Fold `r` into the states, after checking it against the states before it; throws LogInvariantError. */
  add(r: LogRecord): void {
    if (!isForeign(r) && r.event.type === "NameReserved") this.#nameReserved(r.seq, r.event);
    const step = foldStep(this.#states, r);
    if (!step || isForeign(r)) return;
    const { key, before, after } = step;
    if (startsAfresh(r.event) && r.event.type !== "NameReserved" && before)
      throw new LogInvariantError(r.seq, `a second ${r.event.type} of ${what(before)} (last changed at sequence ${before.seq}): a uuid is reserved once`);
    const had = liveImage(before);
    const has = liveImage(after);
    if (had === has) return;
    if (had && this.#images.get(had) === key) this.#images.delete(had);
    if (!has || !after) return;
    const holder = this.#images.get(has);
    const held = holder === undefined ? undefined : this.#states.get(holder);
    if (held && holder !== key && liveImage(held) === has)
      throw new LogInvariantError(r.seq, `${what(after)} names image ${quote(has)}, which ${what(held)} holds while it lives`);
    this.#images.set(has, key);
  }

  #nameReserved(seq: number, e: { kind: Kind; name: string; uuid: string }): void {
    const target = this.#states.get(addressKey({ kind: e.kind, uuid: e.uuid }));
    if (!target || target.kind === "name") return;
    const record = target.record;
    if (record && record.name === e.name) return;
    throw new LogInvariantError(
      seq,
      `NameReserved points ${e.kind} name ${quote(e.name)} at ${what(target)}, ${record ? `the record of name ${quote(record.name)}` : "which has ended"}: a name is reserved for a new record`,
    );
  }
}
