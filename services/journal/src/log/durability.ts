/**
 * Whether the log server makes an append durable before it acknowledges it (docs/operations.md,
 * "Durability"). A journal answers a command once the log acknowledged its events, so a log server
 * that acknowledges writes still in the page cache lets a power cut take back what we answered.
 *
 * nats-server fsyncs before its ack only with `jetstream { sync_interval: always }` (2.10 and later;
 * the default fsyncs every 2 minutes, and 2.9 has no such setting). What a client can see of that:
 *  - the server's version, in the INFO of its connection (below 2.10: it cannot, refused);
 *  - the setting itself, on the server's monitoring endpoint (`/varz`, jetstream.config.sync_always),
 *    when the journal is told where that is (NATS_MONITOR_URL, one URL per server of the cluster).
 * `LOG_FSYNC=off` is the explicit opt-out: the journal then starts on any server and says, once, what
 * that risks.
 */
import { DriverError } from "@csi/contracts";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";

export type LogFsync = "required" | "off";

/** How long one monitoring endpoint may take to answer. */
const VARZ_TIMEOUT_MS = 5_000;
/** The most of a /varz answer we read (it is a few KiB). */
const VARZ_MAX_BYTES = 1 << 20;

/** Why a nats-server of this version cannot fsync every write before its ack, or undefined. */
export function whyVersionCannotSync(version: string | undefined): string | undefined {
  const m = /^v?(\d+)\.(\d+)\./.exec(version ?? "");
  if (!m) return `its version ${JSON.stringify(String(version).slice(0, 32))} is not one we know`;
  const [major, minor] = [Number(m[1]), Number(m[2])];
  if (major > 2 || (major === 2 && minor >= 10)) return undefined;
  return `nats-server ${version} has no sync_interval (2.10 and later have it)`;
}

/** What a /varz answer says of the server's fsync: undefined when it syncs every write, else why not. */
export function whyVarzDoesNotSync(varz: unknown): string | undefined {
  const js = (varz as { jetstream?: { config?: { sync_always?: unknown; sync_interval?: unknown } } } | null)?.jetstream;
  if (!js?.config) return "its monitoring endpoint shows no JetStream configuration";
  if (js.config.sync_always === true) return undefined;
  const every = typeof js.config.sync_interval === "number" ? ` (it fsyncs every ${Math.round(js.config.sync_interval / 1e9)} s)` : "";
  return `it runs without jetstream { sync_interval: always }${every}`;
}

async function varzOf(url: string): Promise<unknown> {
  const res = await fetch(new URL("/varz", url), { signal: AbortSignal.timeout(VARZ_TIMEOUT_MS) });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  const text = await res.text();
  if (text.length > VARZ_MAX_BYTES) throw new Error("answer too large");
  return JSON.parse(text);
}

/**
 * Refuses (FailedPrecondition, the journal exits naming the server and the fix) a log server that
 * would acknowledge an append before it is on disk; with `off`, warns once and goes on.
 */
export async function checkLogDurability(nc: NatsConnection, o: { fsync: LogFsync; monitorUrls: string[]; log: Logger }): Promise<void> {
  if (o.fsync === "off") {
    o.log.warn(
      "LOG_FSYNC=off: the log server's fsync is not checked; if it acknowledges writes before they are on disk, a power cut loses operations we answered",
    );
    return;
  }
  const fix =
    'run nats-server 2.10 or later with jetstream { sync_interval: always } (docs/operations.md, "Durability"), or set LOG_FSYNC=off to accept losing acknowledged operations on a power cut';
  const version = nc.info?.version;
  const old = whyVersionCannotSync(version);
  if (old) throw new DriverError("FailedPrecondition", `the event log's server cannot fsync an append before it acknowledges it: ${old}; ${fix}`);
  // A server down now (one node of a cluster) does not stop a journal: it is checked at the next start.
  let checked = 0;
  for (const url of o.monitorUrls) {
    const varz = await varzOf(url).catch((err: Error) => {
      o.log.warn({ url, err: err.message }, "a log server's monitoring endpoint did not answer: its sync setting is not checked");
      return undefined;
    });
    if (varz === undefined) continue;
    const why = whyVarzDoesNotSync(varz);
    if (why) throw new DriverError("FailedPrecondition", `the event log's server at ${url} does not fsync an append before it acknowledges it: ${why}; ${fix}`);
    checked++;
  }
  if (checked === 0)
    o.log.info(
      { version },
      "the log server's sync setting is not checked (no NATS_MONITOR_URL answered): it must run with jetstream { sync_interval: always }",
    );
  else o.log.info({ version, servers: checked }, "the log server fsyncs every append before its ack");
}
