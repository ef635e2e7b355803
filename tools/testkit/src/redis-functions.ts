/**
 * The journal's Redis function library loaded into a server the stack or a test started, as an
 * identity that may (the admin of a locked-down Redis, the default user of an open one), before
 * any journal runs: what `csictl redis load-functions` does in a deployment (docs/security.md).
 */
import { loadJournalFunctions } from "@csi/journal/redis";
import { type RedisAccess, redisConnectOptions } from "@csi/runtime";
import { Redis } from "ioredis";

export async function loadJournalFunctionsAt(url: string, access: Omit<RedisAccess, "redisUrl"> = {}): Promise<void> {
  const r = new Redis(url, {
    ...redisConnectOptions({ redisUrl: url, ...access }),
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 5000,
  });
  r.on("error", () => {});
  try {
    await r.connect();
    await loadJournalFunctions(r);
  } finally {
    r.disconnect();
  }
}
