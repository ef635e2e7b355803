/**
 * The new master of a Sentinel failover, reached as soon as it is one — not a second later.
 *
 * A failover's leader sentinel sends the chosen replica `SLAVEOF NO ONE` and announces
 * `+failover-state-wait-promotion` (naming that replica and the old master); the replica is a
 * master a few milliseconds later. The sentinels themselves go on naming the old master
 * (`SENTINEL GET-MASTER-ADDR-BY-NAME`) until the leader has *seen* the promotion in the replica's
 * INFO, which it asks for once a second, and announced `+switch-master`: measured here (Redis
 * 7.0.15, down-after 500 ms) the replica was a master 0.88 s after its primary's SIGKILL and the
 * switch came at 1.91 s. A client that only follows `+switch-master` (ioredis' failover detector)
 * spends that second knocking on the dead primary.
 *
 * So a client made with these options hears every sentinel's wait-promotion too, and for
 * EARLY_HOLD_MS after it answers ioredis' "where is the master?" with the replica being promoted
 * (ioredis' `natMap`, asked with the address the sentinels gave): the client connects there, and
 * ioredis' role check (INFO `role:master`, `role: "master"` in the options) refuses it until the
 * promotion has run, so no write reaches a replica. A client connected to the old master (a
 * planned `SENTINEL FAILOVER`, the old primary alive) is disconnected at the announcement, so it
 * writes to the new master from then on instead of to one about to be demoted. `+switch-master`
 * or an abort of the failover ends the early answer; so does EARLY_HOLD_MS without either (a
 * promotion that did not happen: the sentinels' word counts again).
 *
 * The messages come from the sentinels we were configured with (their password, their TLS); each
 * is parsed strictly, for our master name only, and anything else is ignored. A client anyone
 * could steer would send its Redis password wherever it was told, so the replica named is taken
 * only once the announcing sentinel lists it as a replica of our master (`SENTINEL REPLICAS`):
 * the sentinels learn their replicas from the master's own INFO, not from a PUBLISH.
 */
import type { Redis, RedisOptions } from "ioredis";
import { Redis as RedisClient } from "ioredis";

/** How long the promoted replica is the answer after its announcement, unless the switch or an abort comes first. */
export const EARLY_HOLD_MS = 2000;

/** What a sentinel announces that matters here (the channels we subscribe to). */
export const PROMOTION_CHANNELS = ["+failover-state-wait-promotion", "+switch-master", "-failover-abort-slave-timeout", "+failover-end-for-timeout"] as const;

export interface Address {
  host: string;
  port: number;
}

/** A promotion under way: the master the sentinels still name (`host:port`), the replica being promoted, and until when it is the answer. */
export interface EarlyPromotion {
  from: string;
  to: Address;
  until: number;
}

const PORT = /^[0-9]{1,5}$/;
const address = (host: string | undefined, port: string | undefined): Address | undefined =>
  host && port && PORT.test(port) && Number(port) > 0 && Number(port) < 65536 && host.length <= 255 ? { host, port: Number(port) } : undefined;

/**
 * The promotion under way after a sentinel's message on `channel` (pure). Formats, as Sentinel
 * writes them: wait-promotion `slave <ip>:<port> <ip> <port> @ <master-name> <ip> <port>`;
 * switch-master `<master-name> <old-ip> <old-port> <new-ip> <new-port>`; the aborts and the
 * timeout `master <master-name> <ip> <port>`. A message for another master name, or not in its
 * channel's format, changes nothing; an expired promotion is dropped.
 */
export function promotionAfter(
  current: EarlyPromotion | undefined,
  channel: string,
  message: string,
  masterName: string,
  now: number,
): EarlyPromotion | undefined {
  const live = current && current.until > now ? current : undefined;
  if (message.length > 1024) return live;
  const w = message.split(" ");
  if (channel === "+failover-state-wait-promotion") {
    if (w.length !== 8 || w[0] !== "slave" || w[4] !== "@" || w[5] !== masterName) return live;
    const to = address(w[2], w[3]);
    const from = address(w[6], w[7]);
    return to && from ? { from: `${from.host}:${from.port}`, to, until: now + EARLY_HOLD_MS } : live;
  }
  if (channel === "+switch-master") return w.length === 5 && w[0] === masterName ? undefined : live;
  if (channel === "-failover-abort-slave-timeout" || channel === "+failover-end-for-timeout")
    return w.length === 4 && w[0] === "master" && w[1] === masterName ? undefined : live;
  return live;
}

/** The new master a `+switch-master` of our master names (`<master-name> <old-ip> <old-port> <new-ip> <new-port>`), or undefined. Pure. */
export function switchedTo(channel: string, message: string, masterName: string): Address | undefined {
  if (channel !== "+switch-master" || message.length > 1024) return undefined;
  const w = message.split(" ");
  return w.length === 5 && w[0] === masterName ? address(w[3], w[4]) : undefined;
}

/** The address a client asked of the master should connect to (ioredis' natMap, `key` = `host:port` the sentinels named). Pure. */
/** Whether `to` is among a master's replicas as `SENTINEL REPLICAS` lists them (flat name/value arrays). Pure. */
export function listedReplica(replicas: unknown, to: Address): boolean {
  if (!Array.isArray(replicas)) return false;
  return replicas.slice(0, 256).some((r) => {
    if (!Array.isArray(r)) return false;
    const f = new Map<unknown, unknown>();
    for (let i = 0; i + 1 < r.length && i < 128; i += 2) f.set(r[i], r[i + 1]);
    return f.get("ip") === to.host && f.get("port") === String(to.port);
  });
}

export function earlyAddress(p: EarlyPromotion | undefined, key: string, now: number): Address | null {
  return p && p.until > now && key === p.from ? p.to : null;
}

type SentinelOptions = Pick<RedisOptions, "sentinels" | "name" | "sentinelUsername" | "sentinelPassword" | "sentinelTLS" | "enableTLSForSentinelMode">;

/**
 * Hears the sentinels of `options` (every one: only a failover's leader announces its states) and
 * keeps the promotion under way. `natMap` goes into the client's options; `follow(client)` has the
 * client disconnected (to connect again at once) when it is connected to the master being left,
 * and at `+switch-master` when it is not connected to the new master — in place of ioredis'
 * failover detector, which would disconnect a client already on the new master once more.
 */
export class SentinelPromotions {
  #promotion?: EarlyPromotion;
  #client?: Redis;
  readonly #listeners: Redis[] = [];
  readonly #masterName: string;

  constructor(options: SentinelOptions) {
    this.#masterName = options.name ?? "";
    for (const s of options.sentinels ?? []) {
      const sentinel = () =>
        new RedisClient({
          host: s.host,
          port: s.port ?? 26379,
          ...(options.sentinelUsername ? { username: options.sentinelUsername } : {}),
          ...(options.sentinelPassword ? { password: options.sentinelPassword } : {}),
          ...(options.enableTLSForSentinelMode && options.sentinelTLS ? { tls: options.sentinelTLS } : {}),
          // A sentinel away is asked again soon: the next failover may be its to lead.
          retryStrategy: (times) => Math.min(100 * times, 1000),
          maxRetriesPerRequest: null,
          enableReadyCheck: false,
          commandTimeout: 1000,
        });
      const [heard, asked] = [sentinel(), sentinel()];
      for (const r of [heard, asked]) r.on("error", () => {}); // a sentinel away: the others are heard, ioredis' own connector says what matters
      heard.on("message", (channel: string, message: string) => void this.#heard(asked, channel, message));
      heard.subscribe(...PROMOTION_CHANNELS).catch(() => {});
      this.#listeners.push(heard, asked);
    }
  }

  /** ioredis' natMap: the replica being promoted for the old master's address, while the promotion is under way. */
  readonly natMap = (key: string): Address | null => earlyAddress(this.#promotion, key, Date.now());

  follow(client: Redis): void {
    this.#client = client;
  }

  close(): void {
    for (const r of this.#listeners) r.disconnect();
  }

  async #heard(sentinel: Redis, channel: string, message: string): Promise<void> {
    const to = switchedTo(channel, message, this.#masterName);
    if (to && this.#on() !== undefined && this.#on() !== `${to.host}:${to.port}`) this.#client?.disconnect(true);
    const before = this.#promotion;
    const next = promotionAfter(before, channel, message, this.#masterName, Date.now());
    if (!next || next === before) {
      this.#promotion = next;
      return;
    }
    const replicas = await sentinel.call("SENTINEL", "REPLICAS", this.#masterName).catch(() => undefined);
    if (!listedReplica(replicas, next.to) || this.#promotion !== before) return;
    this.#promotion = next;
    if (this.#on() === next.from) this.#client?.disconnect(true);
  }

  /** Where the client is connected (`host:port`), if it is ready. */
  #on(): string | undefined {
    const stream = this.#client?.stream;
    return this.#client?.status === "ready" && stream ? `${stream.remoteAddress}:${stream.remotePort}` : undefined;
  }
}
