/**
 * What the replicated servers say about themselves, for the harness's waits and figures
 * (ha-servers.ts): each wait ends at an event the engine reports, and counts a change in what it
 * reports as progress.
 *
 *  - `natsClusterView`: each node's routes (/routez) and its view of the JetStream meta group
 *    (/jsz): which peers it has routes to, who leads, how many peers it knows and which are current;
 *  - `SentinelEvents`: every event the sentinels publish (+sdown, +odown, +try-failover,
 *    +switch-master, +slave, +sentinel…), subscribed on each sentinel;
 *  - `watchLeaderElections`: JetStream's advisory `$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>`,
 *    published in the stream's own account, so any client of that account can hear it.
 */
import type { LocalServer } from "@csi/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";

interface Jsz {
  meta_cluster?: { leader?: string; cluster_size?: number; replicas?: { name: string; current?: boolean; offline?: boolean }[] };
}
interface Routez {
  routes?: { remote_name?: string }[];
}

/** A monitoring endpoint's JSON, asked with a short timeout (a frozen node must not hold the look). */
async function monitor<T>(server: LocalServer, endpoint: string): Promise<T> {
  if (!server.monitorUrl) throw new Error(`:${server.port} has no monitoring port`);
  const res = await fetch(`${server.monitorUrl}${endpoint}`, { signal: AbortSignal.timeout(2000) });
  if (!res.ok) throw new Error(`${endpoint}: HTTP ${res.status}`);
  return (await res.json()) as T;
}

/** One node's view: its routes, its meta leader, the peers it knows (current of them). */
export interface NodeView {
  whole: boolean;
  /** Routes to every other node. */
  routed: boolean;
  /** The size of the meta group as this node knows it. */
  size: number;
  leader: string | undefined;
  text: string;
}

async function nodeView(server: LocalServer, name: string, size: number): Promise<NodeView> {
  if (!server.running) return { whole: false, routed: false, size: 0, leader: undefined, text: `${name} down` };
  const [jsz, routez] = await Promise.all([monitor<Jsz>(server, "/jsz"), monitor<Routez>(server, "/routez")]);
  const routes = [...new Set((routez.routes ?? []).flatMap((r) => (r.remote_name ? [r.remote_name] : [])))].sort();
  const meta = jsz.meta_cluster;
  const peers = meta?.replicas ?? [];
  const current = peers.filter((p) => p.current && !p.offline).length;
  const routed = routes.length === size - 1;
  // The leader places streams: it must know every peer, and know it as current.
  const leaderKnows = meta?.leader !== name || (peers.length === size - 1 && current === size - 1);
  return {
    whole: routed && meta?.leader !== undefined && (meta.cluster_size ?? 0) >= size && leaderKnows,
    routed,
    size: meta?.cluster_size ?? 0,
    leader: meta?.leader,
    text: `${name}: routes to [${routes.join(",")}], meta leader ${meta?.leader ?? "none"}, cluster size ${meta?.cluster_size ?? "?"}, peers ${peers.length} (${current} current)`,
  };
}

/**
 * The cluster as its nodes report it, named n1, n2, n3 in the order of `nats`: `formed` once every
 * node has routes to all the others and every node names the same meta leader, which knows every
 * peer as current. `text` says what each node reports (what a wait saw last).
 */
export async function natsClusterView(nats: LocalServer[]): Promise<{ formed: boolean; undersized: boolean; text: string }> {
  const views = await Promise.all(
    nats.map((s, i) =>
      nodeView(s, `n${i + 1}`, nats.length).catch((err: Error) => ({
        whole: false,
        routed: false,
        size: 0,
        leader: undefined,
        text: `n${i + 1}: ${err.message}`,
      })),
    ),
  );
  const leaders = new Set(views.map((v) => v.leader));
  const agreed = leaders.size === 1 && !leaders.has(undefined);
  return { formed: views.every((v) => v.whole) && agreed, undersized: undersized(views, nats.length), text: views.map((v) => v.text).join("; ") };
}

/**
 * Every node routed to every other, yet one knows a meta group smaller than the cluster: a node was
 * left out of it at the first start, whether the others agree on a leader (n3 alone, n1 and n2 in
 * a group of 2 led by n1) or not (n3 naming no leader while n1 and n2 name n1 — a fresh machine's
 * `.ci/run` waited 180 s on that). Pure.
 */
export function undersized(views: readonly Pick<NodeView, "routed" | "size">[], clusterSize: number): boolean {
  return views.length === clusterSize && views.every((v) => v.routed) && views.some((v) => v.size > 0 && v.size < clusterSize);
}

export interface SentinelEvent {
  at: number;
  /** Which sentinel said it (its index, 1-based). */
  sentinel: number;
  /** The channel (the event's name: "+switch-master") and its message. */
  channel: string;
  message: string;
}

/**
 * Every event the sentinels publish, as they publish it (each sentinel's PSUBSCRIBE *; the hello
 * channel left out). `last` is what a wait reports; `after(t, channel)` the first such event at or
 * after `t`.
 */
export class SentinelEvents {
  readonly #subs: Redis[] = [];
  readonly #events: SentinelEvent[] = [];

  async watch(sentinels: LocalServer[]): Promise<void> {
    await Promise.all(
      sentinels.map(async (s, i) => {
        const sub = new Redis(s.url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 2000 });
        sub.on("error", () => {});
        this.#subs.push(sub);
        sub.on("pmessage", (_pattern: string, channel: string, message: string) => {
          if (channel.startsWith("__sentinel__")) return;
          this.#events.push({ at: Date.now(), sentinel: i + 1, channel, message });
          if (this.#events.length > 1000) this.#events.splice(0, 500);
        });
        await sub.connect();
        await sub.psubscribe("*");
      }),
    );
  }

  /** What was said last, as a line ("sentinel-2 +switch-master csi 127.0.0.1 1 127.0.0.1 2"), or "nothing". */
  last(): string {
    const e = this.#events.at(-1);
    return e ? `sentinel-${e.sentinel} ${e.channel} ${e.message} (${this.#events.length} events)` : "nothing";
  }

  /** The first event on `channel` at or after `t`. */
  after(t: number, channel: string): SentinelEvent | undefined {
    return this.#events.find((e) => e.at >= t && e.channel === channel);
  }

  close(): void {
    for (const s of this.#subs) s.disconnect();
  }
}

export interface LeaderElection {
  /** When this process heard the advisory (epoch ms). */
  at: number;
  /** The server's own time of the election, as the advisory says (epoch ms; the servers here share this machine's clock). */
  serverAt: number;
  leader: string;
}

/** The stream-leader elections of `stream` from now on, as JetStream announces them. */
export function watchLeaderElections(nc: NatsConnection, stream: string): { elections: LeaderElection[]; stop(): void } {
  const elections: LeaderElection[] = [];
  const sub = nc.subscribe(`$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.${stream}`, {
    callback: (_err, msg) => {
      try {
        const a = msg.json<{ timestamp?: string; leader?: string }>();
        elections.push({ at: Date.now(), serverAt: a.timestamp ? Date.parse(a.timestamp) : Date.now(), leader: a.leader ?? "?" });
      } catch {
        // not an advisory: nothing to record
      }
    },
  });
  return { elections, stop: () => sub.unsubscribe() };
}
