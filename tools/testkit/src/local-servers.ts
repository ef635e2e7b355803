/**
 * Real nats-server (JetStream), redis-server and Redis Sentinel processes on free ports, with data
 * in a directory of the caller's choice. Used by `npm start` (the embedded local stack) and by the
 * test harness (per-file servers that tests can stop, kill and restart to inject faults).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { accessSync, constants, existsSync, mkdirSync, statSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { writeFileDurableSync } from "@csi/runtime";

export type ServerKind = "nats" | "redis" | "sentinel";

export interface LocalServer {
  readonly kind: ServerKind;
  readonly port: number;
  readonly url: string;
  /** A nats-server's monitoring endpoint (/varz, /healthz): the journal checks there that it fsyncs every write (NATS_MONITOR_URL). */
  readonly monitorUrl?: string;
  readonly dataDir: string;
  /** Graceful stop (SIGTERM), waits for exit. */
  stop(): Promise<void>;
  /** Crash (SIGKILL), waits for exit. */
  kill(): Promise<void>;
  /** Start again on the same port with the same data. */
  restart(): Promise<void>;
  readonly running: boolean;
  /** The server process's pid while it runs. */
  readonly pid: number | undefined;
}

/** Ports this process handed out: a port is closed again once read, so the kernel may offer it again before its taker listens. */
const handedOut = new Set<number>();

/**
 * A TCP port nobody listens on right now, and never one this process handed out before (a 3-node
 * cluster takes 9 ports before its servers listen: the same one twice would keep a node out of it).
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const srv = net.createServer();
      srv.unref();
      srv.on("error", reject);
      srv.listen(0, "127.0.0.1", () => {
        const addr = srv.address();
        srv.close(() => (typeof addr === "object" && addr ? resolve(addr.port) : reject(new Error("no port"))));
      });
    });
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
}

function executableFile(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/** The variable naming another binary for a server: NATS_SERVER_BIN, REDIS_SERVER_BIN. */
export const binaryEnv = (name: "nats-server" | "redis-server"): string => `${name.toUpperCase().replace("-", "_")}_BIN`;

/**
 * Find a server binary: the one its variable names (NATS_SERVER_BIN=/path/to/nats-server: e.g.
 * Debian trixie's 2.10.x from scripts/install-nats-server.sh beside the system's 2.9.10), else on
 * PATH or in the Debian locations; install the Debian package if missing and allowed.
 */
export function findBinary(name: "nats-server" | "redis-server"): string {
  const chosen = process.env[binaryEnv(name)];
  if (chosen) {
    if (!executableFile(chosen)) throw new Error(`${binaryEnv(name)}=${chosen}: not an executable file`);
    return chosen;
  }
  if (name === "nats-server") return durableNatsServer();
  return systemBinary(name);
}

/** What `--version` of a nats-server binary prints, as [major, minor, patch]. */
function versionOf(bin: string): number[] {
  const out = execFileSync(bin, ["--version"], { encoding: "utf8" }).trim();
  const m = /v(\d+)\.(\d+)\.(\d+)/.exec(out);
  if (!m) throw new Error(`${bin} --version: no version in ${JSON.stringify(out)}`);
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

/** Whether a nats-server release can fsync every write before its ack (`sync_interval: always`, 2.10 and later). */
export function canSyncAlways([major = 0, minor = 0]: readonly number[]): boolean {
  return major > 2 || (major === 2 && minor >= 10);
}

let durableNats: string | undefined;

/**
 * The nats-server the stack and the tests run when NATS_SERVER_BIN names none: the system's if it
 * can fsync every write before its ack (2.10 or later), else Debian trixie's, which
 * scripts/install-nats-server.sh fetches from Debian's archive into a cache outside the
 * repository (once; later calls reuse it). CSI_UNSAFE_NO_FSYNC=1 accepts the system's as it is.
 */
function durableNatsServer(): string {
  if (durableNats) return durableNats;
  const system = (() => {
    try {
      return systemBinary("nats-server");
    } catch {
      return undefined;
    }
  })();
  if (system && (process.env.CSI_UNSAFE_NO_FSYNC === "1" || canSyncAlways(versionOf(system)))) {
    durableNats = system;
    return system;
  }
  const script = fileURLToPath(new URL("../../../scripts/install-nats-server.sh", import.meta.url));
  try {
    durableNats = execFileSync("bash", [script], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
  } catch (err) {
    throw new Error(
      `${system ? `${system} cannot fsync every write before its ack (it is older than 2.10)` : "no nats-server"}, and ${script} could not fetch one from Debian's archive (${(err as Error).message.split("\n")[0]}): set ${binaryEnv("nats-server")}, or CSI_UNSAFE_NO_FSYNC=1 to run without durable acks (docs/operations.md, "Durability")`,
    );
  }
  return durableNats;
}

function systemBinary(name: "nats-server" | "redis-server"): string {
  const look = () => {
    for (const dir of [...(process.env.PATH ?? "").split(":"), "/usr/sbin", "/usr/bin", "/usr/local/bin"]) {
      const p = path.join(dir, name);
      if (dir && existsSync(p)) return p;
    }
    return undefined;
  };
  let found = look();
  if (!found && process.getuid?.() === 0 && process.env.CSI_NO_APT !== "1") {
    execFileSync("apt-get", ["install", "-y", "-q", name], { stdio: "ignore" });
    found = look();
  }
  if (!found) throw new Error(`${name} not found: install the Debian package ${name} (apt-get install ${name})`);
  return found;
}

/** The version the nats-server the tests run prints (`nats-server --version`: "v2.9.10" → [2, 9, 10]). */
export function natsServerVersion(): { text: string; parts: number[] } {
  const parts = versionOf(findBinary("nats-server"));
  return { text: `v${parts.join(".")}`, parts };
}

/**
 * Why the nats-server the tests run cannot be trusted with a replicated stream across a leader
 * kill, or undefined: before 2.10 the replicas of a stream diverge after a leader SIGKILL
 * (docs/operations.md, "The replicas of a stream diverge on 2.9.10"). The tests that kill stream
 * leaders under load are skipped with this reason; .ci/run runs them again with 2.10.
 */
export function whyNoReplicatedStreams(): string | undefined {
  const nats = natsServerVersion();
  if (canSyncAlways(nats.parts)) return undefined;
  return `nats-server ${nats.text}: its stream replicas diverge after a leader kill (scripts/stream-divergence.ts); run with ${binaryEnv("nats-server")} naming a ≥ 2.10 (bash scripts/install-nats-server.sh prints one)`;
}

/**
 * The arguments of a nats-server that fsyncs every write before its ack: a configuration file
 * `<dataDir>.server.conf` with `jetstream { sync_interval: always }` that includes the caller's own
 * (`-c file` among `extraArgs`, which it replaces), and a monitoring port. CSI_UNSAFE_NO_FSYNC=1
 * leaves the server's default (fsync every 2 minutes: a power cut loses what was acknowledged since).
 */
function natsDurableArgs(dataDir: string, monitorPort: number, extraArgs: readonly string[]): string[] {
  const i = extraArgs.indexOf("-c");
  const given = i >= 0 ? extraArgs[i + 1] : undefined;
  const rest = i >= 0 ? [...extraArgs.slice(0, i), ...extraArgs.slice(i + 2)] : [...extraArgs];
  const conf = `${path.resolve(dataDir)}.server.conf`;
  const lines = ["# Written by the stack's server launcher (tools/testkit/src/local-servers.ts)."];
  // include resolves against this file's directory, and only relative paths.
  if (given) lines.push(`include ${JSON.stringify(path.relative(path.dirname(conf), path.resolve(given)))}`);
  if (process.env.CSI_UNSAFE_NO_FSYNC !== "1") lines.push("jetstream { sync_interval: always }");
  writeConfigDurable(conf, `${lines.join("\n")}\n`);
  return [...rest, "-c", conf, "-m", String(monitorPort)];
}

/** A server's configuration file written so that a power cut cannot take it back (a server restarted after a cut must find what it was started with). */
export const writeConfigDurable = writeFileDurableSync;

/** TLS files of a server (PEM): its certificate and key, and the CA its clients' certificates would be checked against. */
export interface ServerTls {
  cert: string;
  key: string;
  ca: string;
}

interface Spec {
  kind: ServerKind;
  args: (port: number, dataDir: string, host: string) => string[];
  /** Listening with TLS only, on the same port (clients are not asked for certificates). */
  tlsArgs: (port: number, tls: ServerTls) => string[];
  ready: RegExp;
  url: (port: number, tls: boolean, host: string) => string;
}

/** Redis's busy-reply-threshold (ms) on the servers started here: the deploy manifests set the same. */
export const REDIS_BUSY_REPLY_MS = 1000;

/** Where a sentinel's configuration lives in its data directory (written by the caller; Sentinel rewrites it as it learns). */
export const SENTINEL_CONF = "sentinel.conf";

const specs: Record<ServerKind, Spec> = {
  nats: {
    kind: "nats",
    args: (port, dir, host) => ["-a", host, "-p", String(port), "-js", "-sd", dir],
    tlsArgs: (_port, tls) => ["--tls", "--tlscert", tls.cert, "--tlskey", tls.key, "--tlscacert", tls.ca],
    ready: /Server is ready/,
    url: (port, _tls, host) => `nats://${host}:${port}`,
  },
  redis: {
    kind: "redis",
    // Persistence on (AOF) so a restart keeps data, as a production Redis would. A script or function
    // running past REDIS_BUSY_REPLY_MS makes Redis answer BUSY to everyone else and lets an admin kill
    // it (FUNCTION KILL / SCRIPT KILL, docs/operations.md).
    args: (port, dir, host) => [
      ...["--port", String(port), "--bind", host, "--dir", dir, "--save", "", "--appendonly", "yes"],
      ...["--busy-reply-threshold", String(REDIS_BUSY_REPLY_MS)],
    ],
    tlsArgs: (port, tls) => [
      ...["--port", "0", "--tls-port", String(port)],
      ...["--tls-cert-file", tls.cert, "--tls-key-file", tls.key, "--tls-ca-cert-file", tls.ca, "--tls-auth-clients", "no"],
    ],
    ready: /Ready to accept connections/,
    url: (port, tls, host) => `${tls ? "rediss" : "redis"}://${host}:${port}`,
  },
  sentinel: {
    kind: "sentinel",
    // The configuration file must come first; ready once it monitors the master named in it.
    args: (port, dir, host) => [path.join(dir, SENTINEL_CONF), "--sentinel", "--port", String(port), "--bind", host, "--dir", dir],
    tlsArgs: () => {
      throw new Error("TLS sentinels are not supported by the local launcher");
    },
    ready: /\+monitor master/,
    url: (port, _tls, host) => `redis://${host}:${port}`,
  },
};

/** Where a server runs: the address it listens on, and a command it is started under (its pid stays the server's: e.g. `nsenter --net=… --`). */
export interface ServerPlace {
  host: string;
  wrap: readonly string[];
}
const LOOPBACK: ServerPlace = { host: "127.0.0.1", wrap: [] };

/** A server starting that prints nothing for this long is taken as stuck (`launch`). */
const START_QUIET_MS = 60_000;

async function launch(
  bin: string,
  spec: Spec,
  port: number,
  dataDir: string,
  extraArgs: readonly string[] = [],
  tls?: ServerTls,
  at: ServerPlace = LOOPBACK,
): Promise<ChildProcess> {
  mkdirSync(dataDir, { recursive: true });
  // Own process group: a Ctrl-C in the terminal reaches the services first, and we stop the
  // servers after them (otherwise the services would log connection errors while stopping).
  const args = [...spec.args(port, dataDir, at.host), ...(tls ? spec.tlsArgs(port, tls) : []), ...extraArgs];
  const [cmd, ...pre] = [...at.wrap, bin];
  const child = spawn(cmd as string, [...pre, ...args], { stdio: ["ignore", "pipe", "pipe"], detached: true });
  let log = "";
  await new Promise<void>((resolve, reject) => {
    // Given up only once the server said nothing new for START_QUIET_MS: a start that recovers its
    // store says so line by line, and a loaded machine stretches it past any fixed bound.
    const timer = setTimeout(() => reject(new Error(`${spec.kind} did not start: silent for ${START_QUIET_MS} ms:\n${log}`)), START_QUIET_MS);
    const onData = (b: Buffer) => {
      log += b.toString();
      timer.refresh();
      if (spec.ready.test(log)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${spec.kind} exited with ${code} before it was ready:\n${log}`));
    });
  });
  // Keep draining output so the pipe never fills up.
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

/**
 * `extraArgs` go after the usual ones (e.g. `["-c", file]`: a nats-server config with a small
 * max_payload or an authorization block; `["--aclfile", file]` for redis-server). `opts.tls`: the
 * server speaks TLS only (redis-server's URL is then rediss://). `opts.at`: another address than
 * 127.0.0.1 and a command to start it under (a host made of a network namespace: scripts/lib/hosts/).
 */
export async function startServer(
  kind: ServerKind,
  dataDir: string,
  port?: number,
  extraArgs: readonly string[] = [],
  opts: { tls?: ServerTls; at?: ServerPlace } = {},
): Promise<LocalServer> {
  const spec = specs[kind];
  const bin = findBinary(kind === "nats" ? "nats-server" : "redis-server");
  const p = port ?? (await freePort());
  const monitorPort = kind === "nats" ? await freePort() : undefined;
  const args = monitorPort ? natsDurableArgs(dataDir, monitorPort, extraArgs) : extraArgs;
  const at = opts.at ?? LOOPBACK;
  let child: ChildProcess | undefined = await launch(bin, spec, p, dataDir, args, opts.tls, at);
  const signal = async (sig: NodeJS.Signals) => {
    const c = child;
    child = undefined;
    if (!c) return;
    c.kill(sig);
    await exited(c);
  };
  return {
    kind,
    port: p,
    url: spec.url(p, opts.tls !== undefined, at.host),
    ...(monitorPort ? { monitorUrl: `http://${at.host}:${monitorPort}` } : {}),
    dataDir,
    get running() {
      return child !== undefined;
    },
    get pid() {
      return child?.pid;
    },
    stop: () => signal("SIGTERM"),
    kill: () => signal("SIGKILL"),
    restart: async () => {
      await signal("SIGTERM");
      child = await launch(bin, spec, p, dataDir, args, opts.tls, at);
    },
  };
}
