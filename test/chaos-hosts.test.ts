/**
 * The chaos run on hosts (`npm run chaos -- --ha --hosts`, docs/chaos.md "Hosts, not processes"):
 * what a cut means for the links and the rules each host's packet filter gets (pure), and a short
 * real run — three hosts made of network namespaces, a NATS node, a sentinel, a journal and a
 * node-agent on each, two partitions of every kind made with the hosts' own nftables — which must
 * end with every invariant holding. Skipped, saying why, where namespaces cannot be made (not
 * root, no ip/nsenter/nft/curl), where the node operations cannot run, or on a nats-server older
 * than 2.10.
 */
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { whyNoDevices, whyNoReplicatedStreams } from "@csi/testkit";
import { KINDS_BY_MODE, modeOf } from "../scripts/lib/chaos/faults.js";
import { parseChaosArgs, repeatArgs } from "../scripts/lib/chaos/options.js";
import { PARTITION_KINDS } from "../scripts/lib/chaos/partitions.js";
import { formatReport } from "../scripts/lib/chaos/report.js";
import { crashesOf, runChaos } from "../scripts/lib/chaos/run.js";
import { cutLinks, cutPeersOf, describeCut, NO_CUT, rulesOf } from "../scripts/lib/hosts/filter.js";
import { HOST_NAMES, sweepHosts, whyNoHosts } from "../scripts/lib/hosts/netns.js";

const addr = (h: string) => `10.0.0.${HOST_NAMES.indexOf(h as (typeof HOST_NAMES)[number]) + 1}`;

test("a cut's links: a host cut off loses both peers; an asymmetric drop breaks the one link (TCP needs both ways)", () => {
  assert.deepEqual([...cutLinks({ offline: ["a"], drops: [] }, HOST_NAMES)], ["a-b", "a-c"]);
  assert.deepEqual([...cutLinks({ offline: [], drops: [["b", "a"]] }, HOST_NAMES)], ["a-b"]);
  assert.deepEqual(cutPeersOf({ offline: [], drops: [["b", "a"]] }, "b", HOST_NAMES), ["a"]);
  assert.deepEqual(cutPeersOf({ offline: [], drops: [["b", "a"]] }, "c", HOST_NAMES), []);
  assert.equal(cutLinks(NO_CUT, HOST_NAMES).size, 0);
});

test("a host's rules: the dropper filters its input by source address; a host cut off keeps only its loopback; no cut removes the table", () => {
  const asym = rulesOf({ offline: [], drops: [["b", "a"]] }, "a", addr);
  assert.match(asym, /hook input[^}]*ip saddr 10\.0\.0\.2 drop/);
  assert.doesNotMatch(rulesOf({ offline: [], drops: [["b", "a"]] }, "b", addr), /drop/, "b still hears a: no rule on b");
  const off = rulesOf({ offline: ["c"], drops: [] }, "c", addr);
  assert.match(off, /iifname != "lo" drop/);
  assert.match(off, /oifname != "lo" drop/);
  assert.equal(rulesOf(NO_CUT, "a", addr), "add table inet csih\ndelete table inet csih\n");
  assert.equal(describeCut({ offline: ["a"], drops: [["c", "b"]] }), "a cut off, b drops c's packets");
});

test("options: --hosts implies --ha and picks the partition kinds; it repeats; not with --power-cut", () => {
  const o = parseChaosArgs(["--hosts"]);
  assert.deepEqual([o.ha, o.hosts], [true, true]);
  assert.deepEqual(KINDS_BY_MODE[modeOf(o.ha, o.hosts)], PARTITION_KINDS);
  assert.ok(repeatArgs(o).includes("--hosts"));
  assert.throws(() => parseChaosArgs(["--hosts", "--power-cut"]), /do not go together/);
});

test("a service that exited by itself is named with its exit and first error line; one killed or stopped (no process) or running is not", () => {
  const svc = (name: string, running: boolean, p?: { exitCode: number | null; logs: string[] }) =>
    ({
      name,
      running,
      process: p && { child: { exitCode: p.exitCode, signalCode: null }, logs: p.logs },
    }) as unknown as Parameters<typeof crashesOf>[0][number];
  const crashed = svc("journal-a", false, {
    exitCode: 1,
    logs: ['{"level":"info"}', "/x.ts:19", "DriverError: stream CSI_EVENTS_local unavailable", "  at y"],
  });
  assert.deepEqual(crashesOf([crashed, svc("journal-b", false), svc("controller", true, { exitCode: null, logs: [] })]), [
    "journal-a exited by itself (1): DriverError: stream CSI_EVENTS_local unavailable",
  ]);
});

const skip = whyNoHosts() ?? whyNoDevices() ?? whyNoReplicatedStreams();
test("a short chaos run on three hosts: two partitions of every kind — every invariant holds", { skip, timeout: 1_200_000 }, async () => {
  sweepHosts(); // what an earlier run of ours, now gone, left behind
  // Every service's log, kept when the run fails (its path is in the failure), removed when it holds.
  const logFile = path.join(os.tmpdir(), `chaos-hosts-${process.pid}.log`);
  const result = await runChaos({
    logFile,
    ops: 150,
    faultsPerKind: 2,
    seed: 39,
    concurrency: 3,
    replicas: 3,
    ha: true,
    hosts: true,
    powerCut: false,
    failoverBoundMs: 10_000,
  });
  const report = `${formatReport(result)}\nservice logs: ${logFile}`;
  process.stdout.write(`${report}\n`);
  for (const k of PARTITION_KINDS) {
    const mine = result.faults.filter((f) => f.kind === k);
    assert.equal(mine.length, 2, `${k}\n${report}`);
    for (const f of mine) assert.ok(!f.note?.startsWith("injection failed"), `${k}: ${f.note}`);
  }
  assert.ok(result.ok, report);
  rmSync(logFile, { force: true });
  assert.deepEqual(sweepHosts(), [], "the run removed its namespaces and links");
});
