/**
 * Planned restarts of the replicated servers without a gap (docs/operations.md, "Planned restarts"),
 * as an operator does them, on the servers of ha-servers.ts:
 *
 *  - a NATS node: every stream it leads stepped down first ($JS.API.STREAM.LEADER.STEPDOWN.<stream>,
 *    an election that needs no timeout: the old leader hands over), each waited for until another
 *    node leads it; then lame-duck mode (SIGUSR2, what `nats-server --signal ldm=<pid>` sends: the
 *    node hands its meta leadership and any other Raft leadership over, takes no new clients and
 *    closes its clients one by one, which reconnect to the other nodes), its exit awaited; then it
 *    starts again on the same port with the same data, and the next node waits until every stream
 *    is whole again;
 *  - the Redis primary: SENTINEL FAILOVER on a sentinel (the replica promoted, the old primary made
 *    its replica), waited for on the sentinels' own +switch-master event.
 */

import { processAlive } from "@csi/runtime";
import type { LocalServer } from "@csi/testkit";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { type HaServers, LAME_DUCK, streamPlacementOf, untilSeen, withRedis } from "./ha-servers.js";

/** A node's name in the cluster (n1, n2, n3 in the order of `nats`). */
const nameOf = (nats: LocalServer[], s: LocalServer) => `n${nats.indexOf(s) + 1}`;

/** Every stream of the cluster (its names), asked through the nodes that run. */
async function streamNames(nats: LocalServer[]): Promise<string[]> {
  const nc = await connect({ servers: nats.filter((n) => n.running).map((n) => n.url), timeout: 2000 });
  try {
    const names: string[] = [];
    for await (const name of (await jetstreamManager(nc, { timeout: 5000 })).streams.names()) names.push(name);
    return names;
  } finally {
    await nc.close();
  }
}

/**
 * Moves the leadership of every stream `node` leads to another node: a step-down each, repeated
 * until another node leads it (a step-down elects among the current replicas; the old leader may
 * win again only if it is the one current). Resolves with the streams it led.
 */
export async function stepDownStreamsOf(nats: LocalServer[], node: LocalServer): Promise<string[]> {
  const led: string[] = [];
  const nc = await connect({ servers: nats.filter((n) => n.running && n !== node).map((n) => n.url), timeout: 2000 });
  try {
    for (const stream of await streamNames(nats)) {
      if ((await streamPlacementOf(nats, stream)).leader !== node) continue;
      led.push(stream);
      await untilSeen(`${stream} led by a node other than ${nameOf(nats, node)}`, async () => {
        const p = await streamPlacementOf(nats, stream);
        if (p.leader !== undefined && p.leader !== node) return { done: true, seen: "" };
        if (p.leader === node) await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${stream}`, "", { timeout: 5000 }).catch(() => {});
        return { done: false, seen: `leader ${p.leader ? nameOf(nats, p.leader) : "none"}` };
      });
    }
    return led;
  } finally {
    await nc.close();
  }
}

/** Whether the process `pid` is gone (reaped: its exit was seen). */
const gone = (pid: number) => !processAlive(pid);

/**
 * Restarts one NATS node as planned: its streams' leaders stepped down, lame-duck mode, its exit
 * (within what lame-duck mode promises: the grace period and the duration), started again, and
 * every stream whole again. Resolves with the streams it led.
 */
export async function plannedNatsRestart(ha: HaServers, node: LocalServer): Promise<string[]> {
  const led = await stepDownStreamsOf(ha.nats, node);
  const pid = node.pid;
  if (pid === undefined) throw new Error(`${nameOf(ha.nats, node)} does not run`);
  process.kill(pid, "SIGUSR2");
  await untilSeen(
    `${nameOf(ha.nats, node)} out of lame-duck mode`,
    async () => ({ done: gone(pid), seen: "in lame-duck mode" }),
    LAME_DUCK.graceMs + LAME_DUCK.durationS * 1000 + 30_000,
  );
  await node.restart();
  await healedOrRestarted(ha, node);
  return led;
}

/**
 * A restarted node whose replicas stay behind, every other replica current (nats-server 2.10.27
 * under load: the node heard its leaders, they never heard it; nats-io/nats-server#8319 is the
 * open report of a replica that never syncs after a restart), is restarted once more — which
 * brought it back where it stood still for minutes — then waited for with the usual patience. A
 * node restarted after a kill (test/ha.test.ts) is waited for the same way: one stayed "behind"
 * for 180 s after a leader kill in a loop of them under load.
 */
export async function healedOrRestarted(ha: HaServers, node: LocalServer): Promise<void> {
  for (let again = 1; again <= RESTARTS_WHEN_STUCK; again++) {
    const healed = await ha.streamsHealed(STUCK_MS).then(
      () => true,
      (err: Error) => {
        process.stderr.write(`planned restart: ${nameOf(ha.nats, node)} stuck behind (${err.message.slice(0, 300)}); restarting it again\n`);
        return false;
      },
    );
    if (healed) return;
    await node.restart();
  }
  await ha.streamsHealed();
}

/** How long a restarted node's replicas may stand still before it is restarted again, and how often. */
const STUCK_MS = 60_000;
const RESTARTS_WHEN_STUCK = 2;

/** Every NATS node restarted as planned, one after the other. */
export async function rollingNatsRestart(ha: HaServers): Promise<void> {
  for (const node of ha.nats) await plannedNatsRestart(ha, node);
}

/**
 * The Redis primary handed over as planned: SENTINEL FAILOVER (asked of the first sentinel that
 * takes it), then the sentinels' +switch-master and the old primary back as a replica in sync.
 * Resolves with when the switch was announced.
 */
export async function plannedRedisFailover(ha: HaServers): Promise<{ old: LocalServer; asked: number; switchedAt: number }> {
  const old = await ha.redisPrimary();
  const asked = Date.now();
  let taken = false;
  for (const s of ha.sentinels) {
    if (taken) break;
    taken = await withRedis(s.url, (r) => r.call("SENTINEL", "FAILOVER", ha.masterName)).then(
      () => true,
      () => false,
    );
  }
  if (!taken) throw new Error("no sentinel took SENTINEL FAILOVER");
  await untilSeen("the sentinels' +switch-master", async () => ({
    done: ha.sentinelEvents.after(asked, "+switch-master") !== undefined,
    seen: ha.sentinelEvents.last(),
  }));
  const switchedAt = ha.sentinelEvents.after(asked, "+switch-master")?.at ?? Date.now();
  await ha.promotedAway(old);
  return { old, asked, switchedAt };
}
