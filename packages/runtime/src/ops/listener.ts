/**
 * A service's ops face (docs/operations.md, "Metrics and health"): an HTTP listener at
 * METRICS_ADDR (node:http, no framework) and the READY_FILE.
 *
 *   GET /metrics   the service's registry, Prometheus text format
 *   GET /healthz   200 "ok" while the process's event loop runs (liveness)
 *   GET /readyz    200 when every readiness check passes; else 503 with a short JSON naming the
 *                  failing check ({"ready":false,"failing":"redis","reason":"…","checks":{…}})
 *
 * Bounded (ops/guard.ts): these three paths only (404 otherwise), GET and HEAD only (405), no
 * request body (413; a connection that sends one is closed), headers of at most 8 KiB, enforced
 * header and request timeouts, a connection cap that sheds the oldest connection rather than
 * refusing a new one — so /healthz is answered under a slowloris.
 *
 * The listener starts before the service does, so a liveness probe passes during a long start-up (a projection rebuild) while /readyz says
 * "starting".
 *
 * READY_FILE: once the service has started and its checks pass, `{"service","pid","metrics"}`
 * is written there (atomically: temp file + rename); it is removed when the process exits.
 * `npm start` and the tests wait for it instead of a log line. It says the service has been
 * ready; /readyz says whether it still is.
 */
import { renameSync, rmSync, writeFileSync } from "node:fs";
import type http from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { guardedServer } from "./guard.js";
import { localUrl, parseListenAddr } from "./listen-addr.js";
import type { Ops } from "./metrics.js";

export interface OpsConfig {
  /** METRICS_ADDR: "host:port" or "off". */
  metricsAddr: string;
  /** READY_FILE. */
  readyFile?: string | undefined;
}

export interface OpsListener {
  /** http://host:port of the listener (absent when METRICS_ADDR is off). */
  readonly url: string | undefined;
  /** The HTTP server (absent when METRICS_ADDR is off): for tests and diagnostics. */
  readonly server: http.Server | undefined;
  /** The service has started: /readyz follows its checks; the READY_FILE is written once they pass. */
  started(): void;
  /** The service is stopping: /readyz answers 503 from now on. */
  stopping(): void;
  /** Close the listener and remove the READY_FILE. */
  close(): Promise<void>;
}

/** How often the READY_FILE writer asks the checks, at first and at most. */
const READY_POLL_MS = [50, 1000] as const;

function send(res: http.ServerResponse, status: number, type: string, body: string, extra: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": type, "cache-control": "no-store", "content-length": Buffer.byteLength(body), ...extra });
  res.end(body);
}

const hasBody = (req: http.IncomingMessage) => req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] ?? 0) > 0;

/** The registry's text; callers while a collection runs share it (a flood of scrapes costs one collection at a time). */
function sharedCollection(ops: Ops): () => Promise<string> {
  let running: Promise<string> | undefined;
  return () =>
    (running ??= ops.registry.metrics().finally(() => {
      running = undefined;
    }));
}

async function handle(ops: Ops, collect: () => Promise<string>, req: http.IncomingMessage, res: http.ServerResponse, log: Logger): Promise<void> {
  // A body is never read: a connection whose request has not fully arrived when it is answered is closed.
  res.once("finish", () => {
    if (!req.complete) req.socket.destroy();
  });
  const path = (req.url ?? "/").split("?")[0];
  if (path !== "/metrics" && path !== "/healthz" && path !== "/readyz") return send(res, 404, "text/plain", "not found\n");
  if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, "text/plain", "only GET and HEAD\n", { allow: "GET, HEAD", connection: "close" });
  if (hasBody(req)) return send(res, 413, "text/plain", "no request body is accepted\n", { connection: "close" });
  if (path === "/healthz") return send(res, 200, "text/plain", "ok\n");
  if (path === "/readyz") {
    const r = await ops.readiness.report();
    return send(res, r.ready ? 200 : 503, "application/json", `${JSON.stringify(r)}\n`);
  }
  try {
    send(res, 200, ops.registry.contentType, await collect());
  } catch (err) {
    // Its message only: during an outage every scrape (Prometheus: every 10-30 s) fails the same way, a stack each time is noise.
    log.warn({ err: err instanceof Error ? err.message : String(err) }, "metrics could not be collected");
    send(res, 500, "text/plain", "metrics could not be collected\n");
  }
}

/** Start the listener (unless METRICS_ADDR is off) and arm the READY_FILE. Rejects when the address cannot be bound. */
export async function startOpsListener(ops: Ops, cfg: OpsConfig, log: Logger): Promise<OpsListener> {
  const addr = parseListenAddr(cfg.metricsAddr);
  if ("error" in addr) throw new Error(`METRICS_ADDR ${JSON.stringify(cfg.metricsAddr.slice(0, 80))}: ${addr.error}`);
  let server: http.Server | undefined;
  let url: string | undefined;
  if (!addr.off) {
    const collect = sharedCollection(ops);
    const srv = guardedServer((req, res) => {
      handle(ops, collect, req, res, log).catch(() => res.destroy());
    }, ops.registry);
    await new Promise<void>((resolve, reject) => {
      srv.once("error", reject);
      srv.listen(addr.port, addr.host, () => {
        srv.off("error", reject);
        resolve();
      });
    });
    server = srv;
    url = localUrl(addr.host, (srv.address() as AddressInfo).port);
    log.info({ url }, "metrics and health listening");
  }

  const file = cfg.readyFile;
  const removeFile = () => {
    if (file) rmSync(file, { force: true });
  };
  removeFile(); // a file left by a process that was killed is not ours to trust
  if (file) process.once("exit", removeFile);
  let poll: NodeJS.Timeout | undefined;
  let closed = false;

  const writeWhenReady = (delay: number) => {
    if (!file) return;
    poll = setTimeout(async () => {
      const r = await ops.readiness.report();
      if (closed) return;
      if (!r.ready) return writeWhenReady(Math.min(delay * 2, READY_POLL_MS[1]));
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, `${JSON.stringify({ service: ops.service, pid: process.pid, ...(url ? { metrics: url } : {}) })}\n`);
      renameSync(tmp, file);
      log.debug({ file }, "ready file written");
    }, delay);
    poll.unref();
  };

  return {
    url,
    server,
    started: () => {
      ops.readiness.started();
      writeWhenReady(READY_POLL_MS[0]);
    },
    stopping: () => {
      ops.readiness.stopping();
      closed = true;
      clearTimeout(poll);
      removeFile();
    },
    close: async () => {
      closed = true;
      clearTimeout(poll);
      removeFile();
      if (!server) return;
      const s = server;
      await new Promise<void>((resolve) => {
        s.close(() => resolve());
        s.closeAllConnections();
      });
    },
  };
}
