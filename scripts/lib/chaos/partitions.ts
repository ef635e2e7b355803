/**
 * Partitions between hosts (`--hosts`, docs/chaos.md "Hosts, not processes"): the fault kinds of
 * the hosts mode, each made with the hosts' own packet filters (hosts/filter.ts) while the servers
 * and services on every host keep running — a partitioned host goes on serving whoever is on its
 * side, which a paused process never does.
 *
 *   host-cut-off     one host drops every packet but its loopback's (the root namespace loses it too)
 *   host-split       one host and the other two drop each other's packets: a minority/majority
 *                    split (the root namespace, where the CO and the checks are, reaches both sides)
 *   asymmetric-cut   one host drops another's packets; the other still hears it
 *   flapping-link    the link between two hosts cut and restored 4–8 times at random 0.3–1.5 s
 *                    intervals, then left whole
 *
 * Each waits for events, not time (ha-servers.ts's untilSeen: a wait gives up only once what the
 * servers report has stood still for QUIET_MS): a cut is in effect once every host's NATS node reports (its
 * /routez, asked on the host itself) no route to the peers the cut separates it from; for a cut
 * with a majority side, the partition then lasts until the event stream has a leader there
 * (a leader on the minority is replaced: a Raft election, 4–9 s), and 1–3 s more. Healed means:
 * every node reports its routes to both others, every replica of every stream is current, and
 * the sentinels agree on one master whose replica is in sync.
 */
import type { LocalServer } from "@csi/testkit";
import { redisReplicaInSync, streamPlacementOf, untilSeen } from "../ha-servers.js";
import { applyCut, type Cut, cutPeersOf, describeCut, NO_CUT } from "../hosts/filter.js";
import { type Host, type HostName, onHost } from "../hosts/netns.js";
import { type HostServers, sentinelsAgree } from "../hosts/servers.js";
import type { Random } from "../random.js";

export const PARTITION_KINDS = ["host-cut-off", "host-split", "asymmetric-cut", "flapping-link"] as const;
export type PartitionKind = (typeof PARTITION_KINDS)[number];

export interface PartitionRecord {
  target: string;
  tookOverMs?: number;
  note: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const s1 = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * The peers (server names n1…) a host's NATS node has a route to now, as it reports them: its
 * /routez, asked on the host itself (a host cut off still answers its own loopback).
 */
async function routesOf(host: Host, node: LocalServer): Promise<Set<string>> {
  const out = await onHost(host, "curl", ["-sf", "--max-time", "2", `${node.monitorUrl}/routez`]);
  const routes = (JSON.parse(out) as { routes?: { remote_name?: string }[] }).routes ?? [];
  return new Set(routes.flatMap((r) => (r.remote_name ? [r.remote_name] : [])));
}

/** Every host's routes, and a line saying them ("a: [n2,n3]; b: …"): what the waits report and count as progress. */
async function allRoutes(ha: HostServers): Promise<{ routes: Set<string>[]; text: string }> {
  const routes = await Promise.all(ha.hosts.map((h, i) => (ha.nats[i] ? routesOf(h, ha.nats[i]) : Promise.resolve(new Set<string>()))));
  return { routes, text: routes.map((r, i) => `${ha.hosts[i]?.name}: [${[...r].sort().join(",")}]`).join("; ") };
}

export class Partitions {
  readonly #ha: HostServers;
  readonly #stream: string;
  readonly #names: HostName[];

  constructor(ha: HostServers, stream: string) {
    this.#ha = ha;
    this.#stream = stream;
    this.#names = ha.hosts.map((h) => h.name);
  }

  /** Injects one partition of `kind`; resolves once the hosts are whole again. `hit` marks the moment the cut is applied. */
  async inject(kind: PartitionKind, random: Random, hit: () => void): Promise<PartitionRecord> {
    const [x, y] = random.shuffle([...this.#names]) as [HostName, HostName, HostName];
    const others = this.#names.filter((n) => n !== x);
    const cuts: Record<PartitionKind, Cut> = {
      "host-cut-off": { offline: [x], drops: [] },
      "host-split": {
        offline: [],
        drops: others.flatMap((o): [HostName, HostName][] => [
          [o, x],
          [x, o],
        ]),
      },
      "asymmetric-cut": { offline: [], drops: [[y, x]] },
      "flapping-link": {
        offline: [],
        drops: [
          [x, y],
          [y, x],
        ],
      },
    };
    const cut = cuts[kind];
    const minority = kind === "host-cut-off" || kind === "host-split" ? x : undefined;
    const leaderBefore = await this.#leader(minority).catch(() => undefined);
    const t0 = Date.now();
    hit();
    await applyCut(this.#ha.hosts, cut);
    try {
      await this.#routesDown(cut);
      const downMs = Date.now() - t0;
      const held = kind === "flapping-link" ? await this.#flap(cut, random) : await this.#hold(minority, random);
      // From the cut: the routes' time to go down, then the majority's election.
      const tookOver = minority !== undefined && leaderBefore === this.#nodeOf(minority) ? downMs + held.leaderAfterMs : undefined;
      await applyCut(this.#ha.hosts, NO_CUT);
      const healStart = Date.now();
      await this.#whole();
      return {
        target: describeCut(cut),
        ...(tookOver === undefined ? {} : { tookOverMs: tookOver }),
        note: `routes down after ${s1(downMs)}, ${held.text}; whole again ${s1(Date.now() - healStart)} after the heal`,
      };
    } finally {
      await applyCut(this.#ha.hosts, NO_CUT).catch(() => {});
    }
  }

  #nodeOf(h: HostName): LocalServer | undefined {
    return this.#ha.nats[this.#names.indexOf(h)];
  }

  /** The event stream's leader, asked through every node but the minority's. */
  async #leader(minority?: HostName): Promise<LocalServer | undefined> {
    return (await streamPlacementOf(this.#ha.nats, this.#stream, minority ? this.#nodeOf(minority) : undefined)).leader;
  }

  /** Until every node reports no route to the peers the cut separates it from. */
  async #routesDown(cut: Cut): Promise<void> {
    await untilSeen(`the cut (${describeCut(cut)}) in effect: routes reported down`, async () => {
      const { routes, text } = await allRoutes(this.#ha);
      const node = (p: HostName) => `n${this.#names.indexOf(p) + 1}`;
      return { done: this.#names.every((h, i) => !cutPeersOf(cut, h, this.#names).some((p) => routes[i]?.has(node(p)))), seen: text };
    });
  }

  /** Until the stream has a leader outside the minority (asked there), then 1–3 s more. */
  async #hold(minority: HostName | undefined, random: Random): Promise<{ text: string; leaderAfterMs: number }> {
    const t0 = Date.now();
    let leader: LocalServer | undefined;
    await untilSeen("a leader of the event stream on the majority side", async () => {
      leader = await this.#leader(minority);
      const name = leader ? `n${this.#ha.nats.indexOf(leader) + 1}` : "none";
      return { done: leader !== undefined && leader !== (minority ? this.#nodeOf(minority) : undefined), seen: `leader ${name}` };
    });
    const leaderAfterMs = Date.now() - t0;
    const extra = random.int(1000, 3000);
    await sleep(extra);
    const name = `n${this.#ha.nats.indexOf(leader as LocalServer) + 1}`;
    return { text: `stream leader ${name} after ${s1(leaderAfterMs)}, held ${s1(extra)} more`, leaderAfterMs };
  }

  /** The cut restored and made again at random intervals, ending restored. */
  async #flap(cut: Cut, random: Random): Promise<{ text: string; leaderAfterMs: number }> {
    const flips = random.int(4, 8);
    for (let i = 0; i < flips; i++) {
      await sleep(random.int(300, 1500));
      await applyCut(this.#ha.hosts, i % 2 === 0 ? NO_CUT : cut);
    }
    return { text: `flapped ${flips} times`, leaderAfterMs: 0 };
  }

  /** Every node has its routes to both others, every stream's replicas are current, the sentinels agree and the replica is in sync. */
  async #whole(): Promise<void> {
    await untilSeen("every route back", async () => {
      const { routes, text } = await allRoutes(this.#ha);
      return { done: routes.every((r) => r.size === this.#names.length - 1), seen: text };
    });
    await this.#ha.streamsHealed();
    await untilSeen("the sentinels to agree on one master with its replica", async () => ({
      done: await sentinelsAgree(this.#ha.sentinels, 1),
      seen: this.#ha.sentinelEvents.last(),
    }));
    const primary = await this.#ha.redisPrimary();
    for (const r of this.#ha.redis.filter((s) => s !== primary)) await redisReplicaInSync(r);
  }
}
