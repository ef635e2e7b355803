/**
 * The ops listener against slow and abusive clients (ops/guard.ts; docs/operations.md, "Slow and
 * abusive clients"), on real sockets: node:net clients against the listener as runMain starts it
 * (startOpsListener with a METRICS_ADDR and the default limits):
 *
 *  - 200 slowloris connections (a request line, then one header line every 500 ms) leave
 *    /healthz answering within 1 s; the connections past the cap are shed, the others are cut by
 *    the header timeout (408); /metrics works afterwards and counts both;
 *  - a connection past the cap closes the oldest idle one, never one being answered, and never
 *    stalls /healthz;
 *  - scrapes that arrive while a collection runs share it;
 *  - HEAD, other methods, a body, headers past 8 KiB, a body that never ends.
 *
 * The 1 s bound on /healthz is the done-criterion (a kubelet probe's default timeout), so
 * it is asserted on the elapsed time of one request; everything else waits for events.
 */
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { describe, it } from "node:test";
import { pino } from "pino";
import { LISTENER_LIMITS } from "../src/ops/guard.js";
import { type OpsListener, startOpsListener } from "../src/ops/listener.js";
import { Gauge, Ops } from "../src/ops/metrics.js";

const quiet = pino({ level: "silent" });

/** A raw client: what it received, how it ended, and when it was closed. */
interface RawClient {
  socket: net.Socket;
  received(): string;
  /** The socket's first error, if any: see rawClient. */
  error(): NodeJS.ErrnoException | undefined;
  /** Resolves on 'close', whether an error came before it or not. */
  closed: Promise<void>;
}

/**
 * Connect, send `first` once connected, then `every.send` every `every.ms` (if given) until closed.
 *
 * A connection the server destroys while bytes of ours are still unread in its receive buffer is
 * reset, not closed: a slow one shed in the turn it was accepted (its request line not read yet),
 * one cut or answered while more of its headers or body are arriving. The client then sees
 * ECONNRESET (or EPIPE on its next write) — expected, so recorded for the test, not thrown; and
 * `closed` waits for 'close' itself (events.once(socket, "close") would reject on that 'error').
 * The ticks start once `first` is written, never before it (a tick that fired before 'connect'
 * would put a header line ahead of the request line: a 400, not a slowloris).
 */
function rawClient(port: number, first: string, every?: { ms: number; send: string }): RawClient {
  const socket = net.connect(port, "127.0.0.1");
  let data = "";
  let error: NodeJS.ErrnoException | undefined;
  socket.setEncoding("latin1");
  socket.on("data", (d: string) => {
    data += d;
  });
  socket.on("error", (err: NodeJS.ErrnoException) => {
    error ??= err;
  });
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.once("connect", () => {
    socket.write(first);
    if (!every) return;
    const tick = setInterval(() => socket.writable && socket.write(every.send), every.ms);
    socket.once("close", () => clearInterval(tick));
  });
  return { socket, received: () => data, error: () => error, closed };
}

/** The connection was reset by the server (what a client sees when the server closes it with its bytes unread). */
const wasReset = (c: RawClient) => ["ECONNRESET", "EPIPE"].includes(c.error()?.code ?? "");

/** A slowloris: a request line and a header, then one more header line every 500 ms; never the blank line. */
const slowloris = (port: number) => rawClient(port, "GET /healthz HTTP/1.1\r\nHost: probe\r\n", { ms: 500, send: "X-Slow: 1\r\n" });

/** Resolves once `server` has emitted `event` `n` more times. */
function seen(server: http.Server, event: "connection" | "request", n: number): Promise<void> {
  return new Promise((resolve) => {
    let k = 0;
    const on = () => {
      if (++k < n) return;
      server.off(event, on);
      resolve();
    };
    server.on(event, on);
  });
}

/** Resolves once `server` has accepted `n` more connections. */
const accepted = (server: http.Server, n: number) => seen(server, "connection", n);

/** One request on a fresh connection, as a probe makes it: status, headers, body and elapsed milliseconds. */
function probe(url: string, path: string, method = "GET"): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${path}`, { method, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        body += d;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, ms: performance.now() - t0 }));
    });
    req.on("error", reject);
    req.setTimeout(5_000, () => req.destroy(new Error(`${path}: no answer within 5 s`)));
    req.end();
  });
}

/** The value of one sample in a Prometheus text. */
function sample(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

async function withListener(fn: (l: OpsListener, port: number, ops: Ops) => Promise<void>): Promise<void> {
  const ops = new Ops("journal");
  const l = await startOpsListener(ops, { metricsAddr: "127.0.0.1:0" }, quiet);
  try {
    await fn(l, Number(new URL(l.url as string).port), ops);
  } finally {
    await l.close();
  }
}

describe("the ops listener under slow clients", () => {
  it("200 slowloris connections: /healthz answers within 1 s; each slow one is shed or cut by the header timeout; /metrics counts them", async (t) => {
    await withListener(async (l, port) => {
      const n = 200;
      const cap = LISTENER_LIMITS.maxConnections;
      const all = accepted(l.server as http.Server, n);
      const clients = Array.from({ length: n }, () => slowloris(port));
      await all;

      const health = await probe(l.url as string, "/healthz");
      t.diagnostic(`/healthz under ${n} slowloris connections: ${health.status} in ${health.ms.toFixed(1)} ms`);
      assert.equal(health.status, 200);
      assert.equal(health.body, "ok\n");
      assert.ok(health.ms < 1_000, `/healthz took ${health.ms.toFixed(0)} ms`);

      const since = performance.now();
      await Promise.all(clients.map((c) => c.closed));
      const timedOut = clients.filter((c) => c.received().startsWith("HTTP/1.1 408 "));
      const shed = clients.filter((c) => c.received() === "");
      const reset = clients.filter(wasReset);
      t.diagnostic(
        `${shed.length} shed at the cap, ${timedOut.length} cut by the header timeout ${(performance.now() - since).toFixed(0)} ms after the probe; ${reset.length} of them reset`,
      );
      assert.deepEqual(
        clients.filter((c) => c.error() && !wasReset(c)).map((c) => c.error()?.message),
        [],
        "a slow connection's only error is a reset by the server",
      );
      assert.equal(shed.length + timedOut.length, n, "every slow connection was either shed or answered 408");
      assert.equal(shed.length, n + 1 - cap, "past the cap, one shed per new connection (the probe's included)");

      const metrics = await probe(l.url as string, "/metrics");
      assert.equal(metrics.status, 200);
      assert.equal(sample(metrics.body, 'csi_ops_connections_closed_total{reason="shed"}'), shed.length);
      assert.equal(sample(metrics.body, 'csi_ops_connections_closed_total{reason="request_timeout"}'), timedOut.length);
      assert.ok(sample(metrics.body, "csi_ops_connections") <= 2, "the slow connections are gone");
      assert.match(metrics.body, /^process_cpu_user_seconds_total /m);
    });
  });

  it("a connection past the cap closes the oldest idle one, not one being answered, and /healthz does not wait", async () => {
    await withListener(async (l, port, ops) => {
      const server = l.server as http.Server;
      const cap = LISTENER_LIMITS.maxConnections;
      let release: (ok: true) => void = () => {};
      ops.readiness.add("gate", () => new Promise<true>((r) => (release = r)));
      l.started();

      // The oldest connection is being answered: its /readyz waits on the gate.
      let asked = accepted(server, 1);
      const answering = rawClient(port, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
      await asked;
      // Then cap - 1 idle ones (a request line, nothing more), one at a time so their age is their order.
      const idle: RawClient[] = [];
      for (let i = 1; i < cap; i++) {
        asked = accepted(server, 1);
        idle.push(rawClient(port, "GET /metrics HTTP/1.1\r\n"));
        await asked;
      }

      const health = await probe(l.url as string, "/healthz");
      assert.equal(health.status, 200);
      assert.ok(health.ms < 1_000, `/healthz took ${health.ms.toFixed(0)} ms`);
      await idle[0]?.closed;
      assert.equal(idle[0]?.received(), "", "the oldest idle connection was shed, unanswered");
      assert.ok(
        idle.slice(1).every((c) => !c.socket.destroyed),
        "only one was shed",
      );
      assert.equal(answering.socket.destroyed, false, "the connection being answered was kept");

      release(true);
      await new Promise<void>((resolve) => {
        const check = () => (answering.received().includes("\r\n\r\n{") ? resolve() : answering.socket.once("data", check));
        check();
      });
      assert.match(answering.received(), /^HTTP\/1\.1 200 /);
      for (const c of [answering, ...idle]) c.socket.destroy();
    });
  });
});

describe("the ops listener under many scrapes", () => {
  it("scrapes while a collection runs share it: one collection for all of them", async () => {
    await withListener(async (l, _port, ops) => {
      let collections = 0;
      let release: () => void = () => {};
      const gate = new Promise<void>((r) => (release = r));
      new Gauge({
        name: "test_slow_collect",
        help: "a gauge whose collection waits on the test",
        registers: [ops.registry],
        async collect() {
          collections++;
          await gate;
          this.set(collections);
        },
      });
      const n = 5;
      const arrived = seen(l.server as http.Server, "request", n);
      const scrapes = Array.from({ length: n }, () => probe(l.url as string, "/metrics"));
      await arrived;
      release();
      const got = await Promise.all(scrapes);
      assert.equal(collections, 1);
      for (const g of got) {
        assert.equal(g.status, 200);
        assert.equal(sample(g.body, "test_slow_collect"), 1);
      }
      await probe(l.url as string, "/metrics");
      assert.equal(collections, 2, "a scrape after the shared one collects afresh");
    });
  });
});

describe("the ops listener's requests are small and read-only", () => {
  it("HEAD is answered without a body; another method is 405 (404 off the three paths)", async () => {
    await withListener(async (l) => {
      const url = l.url as string;
      const head = await probe(url, "/healthz", "HEAD");
      assert.equal(head.status, 200);
      assert.equal(head.body, "");
      assert.equal(head.headers["content-length"], "3");
      const put = await probe(url, "/healthz", "PUT");
      assert.equal(put.status, 405);
      assert.equal(put.headers.allow, "GET, HEAD");
      assert.equal((await probe(url, "/nothing", "DELETE")).status, 404);
    });
  });

  it("a GET with a body is 413; headers past 8 KiB are 431; a body that never ends is answered and its connection closed", async () => {
    await withListener(async (_l, port) => {
      const withBody = rawClient(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx");
      await withBody.closed;
      assert.match(withBody.received(), /^HTTP\/1\.1 413 /);

      const big = rawClient(port, `GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(LISTENER_LIMITS.maxHeaderBytes)}\r\n\r\n`);
      await big.closed;
      assert.match(big.received(), /^HTTP\/1\.1 431 /);

      const endless = rawClient(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n", { ms: 50, send: "x".repeat(100) });
      await endless.closed;
      assert.match(endless.received(), /^HTTP\/1\.1 405 /);
    });
  });
});
