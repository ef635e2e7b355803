/**
 * csictl on a running `npm start` stack: a node's claims and registration. `volume detach` releases
 * the stale claim verify reports of a node that is gone (the journal's volume.unpublish for that
 * node); `node remove` forgets a node, refused while it is healthy or holds claims unless --force,
 * and in the NATS account layout (SECURE=1) made as the fleet user (csictl's admin account only
 * reads the registrations).
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { type NodeRegistration, nodeSubjects } from "@csi/contracts";
import { csictlAt, runStack } from "@csi/testkit";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

const HOUR = 3600_000;

async function stackOf(cleanups: (() => Promise<void>)[], env: Record<string, string>) {
  const { runDir } = await runStack(cleanups, { CATCHUP_EVERY_MS: "0", ...env });
  const stack = JSON.parse(await readFile(path.join(runDir, "stack.json"), "utf8")) as { natsUrl: string; nodeId: string };
  const { csictl, json } = csictlAt(runDir);
  return { runDir, stack, csictl, json };
}

/** A registration as a node-agent that stopped an hour ago left it (open NATS: published as it would). */
async function staleNode(natsUrl: string, nodeId: string, topology: Record<string, string>): Promise<void> {
  const nc = await connect({ servers: natsUrl });
  try {
    const reg: NodeRegistration = {
      nodeId,
      maxVolumes: 0,
      topology,
      capabilities: [],
      version: "0.1.0",
      time: new Date(Date.now() - HOUR).toISOString(),
      heartbeatMs: 10_000,
    };
    await jetstream(nc).publish(nodeSubjects.registration(nodeId), JSON.stringify(reg));
  } finally {
    await nc.close();
  }
}

describe("an open stack: volume detach, node remove", () => {
  const cleanups: (() => Promise<void>)[] = [];
  let s: Awaited<ReturnType<typeof stackOf>>;
  before(async () => {
    s = await stackOf(cleanups, {});
  });
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });
  const json = <T>(...args: string[]) => s.json<T>(...args);
  const nodeIds = async () => (await s.csictl("nodes", "-o", "name")).stdout.trim().split("\n").filter(Boolean).sort();

  test("a stopped node with a claim: refused, detached, then removed; nodes exits 0 again", async () => {
    // The stack's own node's topology (its pool is reachable from it), as a node beside it would have.
    const nodes = await json<{ items: { nodeId: string; topology: Record<string, string> }[] }>("nodes");
    const topology = nodes.items.find((n) => n.nodeId === s.stack.nodeId)?.topology ?? {};
    await staleNode(s.stack.natsUrl, "gone-1", topology);
    await staleNode(s.stack.natsUrl, "gone-2", topology);
    const { volume } = await json<{ volume: { volumeId: string } }>("volume", "create", "csictl-detach", "--size", "2Mi");
    const pub = await s.csictl(
      "call",
      "Controller.ControllerPublishVolume",
      JSON.stringify({ volumeId: volume.volumeId, nodeId: "gone-2", volumeCapability: { accessMode: { mode: "SINGLE_NODE_WRITER" }, mount: {} } }),
    );
    assert.equal(pub.code, 0, pub.stderr);
    const unhealthy = await s.csictl("nodes");
    assert.equal(unhealthy.code, 1, "two stopped nodes: unhealthy");
    assert.deepEqual(await nodeIds(), ["gone-1", "gone-2", s.stack.nodeId].sort());

    const verify = await s.csictl("--json", "verify");
    const stale = (JSON.parse(verify.stdout) as { findings: { type: string; nodeId?: string }[] }).findings.filter((f) => f.type === "staleClaim");
    assert.deepEqual(
      stale.map((f) => f.nodeId),
      ["gone-2"],
    );

    const refused = await s.csictl("node", "remove", "gone-2");
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(
      refused.stderr,
      new RegExp(
        `^csictl: node gone-2 not removed: it holds a claim on ${volume.volumeId} \\(csictl-detach\\): csictl volume detach <volume> gone-2 releases each \\(or --force\\)\\n$`,
      ),
    );

    const detached = await json<{ released: boolean; nodeId: string }>("volume", "detach", "csictl-detach", "gone-2");
    assert.deepEqual([detached.released, detached.nodeId], [true, "gone-2"]);
    const again = await s.csictl("volume", "detach", volume.volumeId, "gone-2");
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /gone-2 holds no claim on \S+: nothing changed/);
    assert.match(again.stdout, /^RELEASED\s+no$/m);

    for (const n of ["gone-2", "gone-1"]) {
      const r = await s.csictl("node", "remove", n);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, new RegExp(`removed ${n}: csictl nodes no longer lists it`));
    }
    assert.deepEqual(await nodeIds(), [s.stack.nodeId]);
    assert.equal((await s.csictl("nodes")).code, 0, "every node left is healthy");
    assert.equal((await s.csictl("volume", "delete", "csictl-detach")).code, 0, "no claim holds it");
  });

  test("a healthy node is refused without --force; a node never registered is NOT_FOUND", async () => {
    const healthy = await s.csictl("node", "remove", s.stack.nodeId);
    assert.equal(healthy.code, 1, healthy.stderr);
    assert.match(
      healthy.stderr,
      /not removed: it is healthy \(last heartbeat \d+s ago\): stop its node-agent first, or it registers again within \d+s \(or --force\)/,
    );
    const none = await s.csictl("node", "remove", "no-such-node");
    assert.equal(none.code, 1);
    assert.match(none.stderr, /^csictl: NOT_FOUND: node "no-such-node" has no registration/);
    const usage = await s.csictl("volume", "detach", "csictl-x");
    assert.equal(usage.code, 2, "the node is required");
  });
});

describe("the account layout (SECURE=1): node remove is made as the fleet user", () => {
  const cleanups: (() => Promise<void>)[] = [];
  let s: Awaited<ReturnType<typeof stackOf>>;
  before(async () => {
    s = await stackOf(cleanups, { SECURE: "1" });
  });
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  test("refused while healthy; --force purges its registration through the fleet account", async () => {
    const refused = await s.csictl("node", "remove", s.stack.nodeId);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /it is healthy/);
    const forced = await s.csictl("--json", "node", "remove", "--force", s.stack.nodeId);
    assert.equal(forced.code, 0, forced.stderr);
    const r = JSON.parse(forced.stdout) as { removed: boolean; purged: number; wasHealthy: boolean };
    assert.deepEqual([r.removed, r.wasHealthy], [true, true]);
    assert.ok(r.purged >= 1, `purged ${r.purged}`);
  });
});
