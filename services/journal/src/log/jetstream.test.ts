/** The event log adapter's pure parts: when a replicated stream whose leader answers can still not take an append. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { StreamInfo } from "@nats-io/jetstream";
import { noQuorum, REPLICA_SILENT_NS } from "./jetstream.js";

type Peer = NonNullable<NonNullable<StreamInfo["cluster"]>["replicas"]>[number];
const peer = (name: string, more: Partial<Peer> = {}): Peer => ({ name, current: true, offline: false, active: 400_000_000, lag: 0, ...more });
const info = (replicas: number, cluster?: StreamInfo["cluster"]) => ({ config: { num_replicas: replicas } as StreamInfo["config"], cluster });

describe("noQuorum: can the stream take an append although its leader answers?", () => {
  test("a stream of one replica: always (its leader is all of it)", () => {
    assert.equal(noQuorum(info(1, { name: "c", leader: "n1" })), undefined);
    assert.equal(noQuorum(info(1)), undefined);
  });

  test("three replicas, all in touch, or one lost: yes", () => {
    assert.equal(noQuorum(info(3, { leader: "n1", replicas: [peer("n2"), peer("n3")] })), undefined);
    assert.equal(noQuorum(info(3, { leader: "n1", replicas: [peer("n2"), peer("n3", { offline: true, current: false })] })), undefined);
  });

  test("three replicas, the leader hears from neither (two servers killed): no, saying so", () => {
    const why = noQuorum(info(3, { leader: "n1", replicas: [peer("n2", { active: REPLICA_SILENT_NS + 1 }), peer("n3", { current: false })] }));
    assert.match(why ?? "", /in touch with 1 of its 3 replicas, below a quorum of 2/);
  });

  test("a replica silent past REPLICA_SILENT_NS, or offline, does not count even if it says current", () => {
    assert.ok(noQuorum(info(3, { leader: "n1", replicas: [peer("n2", { active: REPLICA_SILENT_NS }), peer("n3", { offline: true })] })));
  });

  test("no leader: no", () => {
    assert.match(noQuorum(info(3, { name: "c", replicas: [peer("n2"), peer("n3")] })) ?? "", /no leader/);
  });

  test("five replicas need the leader and two more", () => {
    const silent = { active: REPLICA_SILENT_NS * 2 };
    assert.equal(noQuorum(info(5, { leader: "n1", replicas: [peer("n2"), peer("n3"), peer("n4", silent), peer("n5", silent)] })), undefined);
    assert.ok(noQuorum(info(5, { leader: "n1", replicas: [peer("n2"), peer("n3", silent), peer("n4", silent), peer("n5", silent)] })));
  });

  test("right after an incident: only replicas heard from since count (a leader learns of its peers' death from their silence)", () => {
    const cluster = { leader: "n1", replicas: [peer("n2", { active: 900_000_000 }), peer("n3", { active: 900_000_000 })] };
    assert.equal(noQuorum(info(3, cluster)), undefined, "900 ms of silence is within the default");
    assert.match(noQuorum(info(3, cluster), 500_000_000) ?? "", /in touch with 1 of its 3/, "down 500 ms ago: nobody heard since");
    assert.equal(noQuorum(info(3, cluster), 1_000_000_000), undefined, "down 1 s ago: both heard since");
  });
});
