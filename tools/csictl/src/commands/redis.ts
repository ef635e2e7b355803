/**
 * `redis load-functions`: load the journal's Redis function library (this version's,
 * `csi_journal_v<N>`: FUNCTION LOAD REPLACE) as an identity that may: the admin user of a
 * locked-down Redis (docs/security.md; the running stack's, or REDIS_USERNAME/REDIS_PASSWORD), or the
 * default user of an open one. The journal's own user may call the functions but not load them.
 * Libraries of other versions are listed and kept (a journal of that version may still run);
 * `--prune` deletes them once every journal runs this version (docs/operations.md).
 */
import { JOURNAL_LIBRARY, journalLibraries, loadJournalFunctions } from "@csi/journal/redis";
import { REDIS_ADMIN_USER } from "../domain/auth-files.js";
import { CliError, EXIT } from "../errors.js";
import { fields } from "../output.js";
import type { Session } from "../session.js";

const NOPERM = /NOPERM/;

export async function loadFunctions(s: Session, o: { prune?: boolean }): Promise<void> {
  const redis = await s.redis(REDIS_ADMIN_USER);
  const refused = (what: string) => (err: unknown) => {
    if (!NOPERM.test((err as Error)?.message ?? "")) throw err;
    throw new CliError(
      EXIT.failed,
      `this Redis user may not ${what}: run it as the Redis admin user (REDIS_USERNAME=${REDIS_ADMIN_USER} and its REDIS_PASSWORD; docs/security.md)`,
      { cause: err },
    );
  };
  const loaded = await loadJournalFunctions(redis).catch(refused("load functions (FUNCTION LOAD)"));
  const others = (await journalLibraries(redis).catch(refused("list functions (FUNCTION LIST)"))).filter((l) => l !== JOURNAL_LIBRARY);
  const pruned: string[] = [];
  if (o.prune)
    for (const lib of others) {
      await redis.call("FUNCTION", "DELETE", lib);
      pruned.push(lib);
    }
  const kept = others.filter((l) => !pruned.includes(l));
  s.out.result({ ...loaded, kept, pruned }, () =>
    fields([
      ["LIBRARY", `${loaded.library} (loaded)`],
      ["SHA-256", loaded.sha256],
      ["OTHER VERSIONS", kept.length ? `${kept.join(", ")} (kept: --prune deletes them once no journal of theirs runs)` : "none"],
      ...(pruned.length ? ([["DELETED", pruned.join(", ")]] as [string, string][]) : []),
    ]),
  );
}
