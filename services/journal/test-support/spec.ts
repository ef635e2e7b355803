/**
 * Given/when/then for the journal's deciders (Emmett's DeciderSpecification, with one round of
 * a run): given the events of the log (folded with the one evolve), the images looked at, a
 * failed step; when a command decides; then its decision — or the error it refuses with. Pure:
 * no server, no clock, no random id (the run's new uuids are U(0), U(1), …). Tests only.
 */
import assert from "node:assert/strict";
import {
  DriverError,
  type ErrorName,
  type EventBody,
  type JournalCommand,
  type JournalEvent,
  journalContract,
  type ParsedRequest,
  type ResolvedCluster,
  resolveClusters,
  type StoredEvent,
} from "@csi/contracts";
import type { Command, Ctx, Decision, Failure, ImageRef, PoolInfo, View } from "../src/commands/decider.js";
import { imageKey } from "../src/commands/decider.js";
import { deviceUse } from "../src/commands/deciders/devices.js";
import { type Address, addressKey, Fold } from "../src/fold/evolve.js";
import type { ImageInfo } from "../src/pools/port.js";

/** The uuid a run makes as its i-th new aggregate. */
export const U = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;

export const CLUSTER = resolveClusters(
  {
    clusters: [
      {
        clusterID: "c1",
        pools: [
          { name: "default", id: 1 },
          { name: "fast", id: 2 },
        ],
      },
    ],
  },
  "/nonexistent",
).get("c1") as ResolvedCluster;
export const POOLS = new Map<string, PoolInfo>([
  ["default", { poolId: 1, maxImageBytes: 64 * 1024 ** 3, publishContext: (n) => ({ imagePath: `/pools/default/${n}` }) }],
  ["fast", { poolId: 2, maxImageBytes: 8 * 1024 ** 2, publishContext: (n) => ({ imagePath: `/pools/fast/${n}` }) }],
]);

/** A command's request as the journal gets it (parsed: defaults filled in). */
export function request<C extends JournalCommand>(command: C, body: Record<string, unknown>): ParsedRequest<C> {
  return journalContract[command].request.parse({ requestId: "r-spec", ...body }) as ParsedRequest<C>;
}

let lastSeq = 0;
/** Event bodies as the log stores them: stamped, with sequences after every one handed out so far. */
export function landed(...bodies: EventBody[]): StoredEvent[] {
  return bodies.map((body) => ({
    seq: ++lastSeq,
    subject: "s",
    event: { ...body, v: 1, requestId: "r-before", actor: { service: "journal", replica: "spec" }, time: "2026-01-01T00:00:00.000Z" } as JournalEvent,
  }));
}

export const image = (name: string, sizeBytes = 1024 * 1024, id = "img-1"): ImageInfo => ({ name, id, sizeBytes, readOnly: false });

interface Given {
  events: StoredEvent[];
  images: [ImageRef, ImageInfo | null][];
  claims: [string, number][];
  /** Events this run appended (also in `events`): the decider sees them as its own. */
  appended: StoredEvent[];
  /** Aggregates read with no event (their state is none), beside those the events name. */
  read: Address[];
  /** Aggregates read from their own subject of the log (View.fromLog). */
  logged: Address[];
  /** Images the run made itself (also in `images`). */
  made: ImageRef[];
  /** Volumes whose device reports the run read (View.devices: from the DeviceStateReported among `events`). */
  devicesRead: string[];
  failed?: Failure;
}

/** Start a spec from the log's events (all of them count as read under the run's locks). */
export function given(...events: StoredEvent[]) {
  return new Spec({ events, images: [], claims: [], appended: [], read: [], logged: [], made: [], devicesRead: [] });
}

class Spec {
  constructor(private readonly g: Given) {}

  /** Images the run looked at (null: absent). */
  images(...images: [ImageRef, ImageInfo | null][]) {
    return new Spec({ ...this.g, images: [...this.g.images, ...images] });
  }

  /** Images the run made itself (and so looked at). */
  made(...images: [ImageRef, ImageInfo][]) {
    return new Spec({ ...this.g, images: [...this.g.images, ...images], made: [...this.g.made, ...images.map(([ref]) => ref)] });
  }

  /** Events this run appended itself (they are part of the log too). */
  appended(...events: StoredEvent[]) {
    return new Spec({ ...this.g, events: [...this.g.events, ...events], appended: [...this.g.appended, ...events] });
  }

  /** Aggregates the run read and found empty (an aggregate the events name counts as read already). */
  read(...addresses: Address[]) {
    return new Spec({ ...this.g, read: [...this.g.read, ...addresses] });
  }

  /** Aggregates the run read from the log (their state there is what the events say, or none). */
  fromLog(...addresses: Address[]) {
    return new Spec({ ...this.g, read: [...this.g.read, ...addresses], logged: [...this.g.logged, ...addresses] });
  }

  /** The nodes' device reports of these volumes were read (they are the DeviceStateReported events given). */
  devicesRead(...uuids: string[]) {
    return new Spec({ ...this.g, devicesRead: [...this.g.devicesRead, ...uuids] });
  }

  nodeClaims(nodeId: string, n: number) {
    return new Spec({ ...this.g, claims: [...this.g.claims, [nodeId, n]] });
  }

  failed(f: Failure) {
    return new Spec({ ...this.g, failed: f });
  }

  /** The decision of one round of `cmd` on this view. */
  when<R>(cmd: Command<R>) {
    const fold = new Fold();
    for (const a of this.g.read) fold.know(a, undefined);
    fold.apply(this.g.events);
    const images = new Map(this.g.images.map(([ref, info]) => [imageKey(ref), info]));
    const view: View = {
      state: (a) => fold.state(a),
      has: (a) => fold.has(a),
      fromLog: (a) => this.g.logged.some((x) => addressKey(x) === addressKey(a)),
      image: (ref) => (images.has(imageKey(ref)) ? images.get(imageKey(ref)) : undefined),
      nodeClaims: (n) => new Map(this.g.claims).get(n) ?? 0,
      devices: (uuid) =>
        this.g.devicesRead.includes(uuid) ? deviceUse(this.g.events.map((e) => e.event).filter((e) => "uuid" in e && e.uuid === uuid)) : undefined,
      appended: this.g.appended,
      made: this.g.made,
      ...(this.g.failed ? { failed: this.g.failed } : {}),
    };
    const ctx: Ctx = { cluster: CLUSTER, pools: POOLS, ids: U };
    const decide = () => cmd.decide(view, ctx);
    return {
      // biome-ignore lint/suspicious/noThenProperty: given/when/then reads as the specification it is; this object is never awaited
      then(expected: Decision<R>) {
        assert.deepEqual(decide(), expected);
      },
      /** The decision, for checks a deepEqual would make unreadable. */
      decision(): Decision<R> {
        return decide();
      },
      thenThrows(code: ErrorName, message?: RegExp) {
        assert.throws(decide, (err: unknown) => {
          assert.ok(err instanceof DriverError, String(err));
          assert.equal(err.code, code, err.message);
          if (message) assert.match(err.message, message);
          return true;
        });
      },
    };
  }
}
