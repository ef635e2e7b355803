/**
 * Redis commands served so far (`INFO commandstats`: the sum of every command's calls), so a bench
 * can say how many commands an operation costs (each reading adds the INFO itself: one).
 */
import { Redis } from "ioredis";

export function redisCalls(url: string): { total: () => Promise<number>; close: () => void } {
  const r = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 1 });
  return {
    total: async () => {
      const info = await r.info("commandstats");
      let n = 0;
      for (const m of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) n += Number(m[1]);
      return n;
    },
    close: () => r.disconnect(),
  };
}
