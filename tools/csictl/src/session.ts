/**
 * One csictl run's connections, opened on first use and closed at the end: NATS (the journal's
 * commands, the event log, service discovery, node registrations), Redis (the projection), the
 * CSI gRPC endpoints. A server that does not answer becomes exit status 3 with a line that names
 * it, never a hang: every connection and call is bounded by --timeout.
 */
import path from "node:path";
import { type Clusters, clusterLogApi, DriverError, decomposeVolumeId, inboxPrefix, type NatsRole, type ResolvedCluster } from "@csi/contracts";
import { JetStreamLog as EventLog } from "@csi/journal/log";
import {
  AccessError,
  type CsiClient,
  type CsiService,
  connectNats,
  csiClient,
  describeRedis,
  type FleetAccess,
  fleetAccess,
  JournalClient,
  loadClusters,
  natsConnectOptions,
  type RedisAccess,
  redactUrl,
  redisConnectOptions,
} from "@csi/runtime";
import { type JetStreamManager, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { natsAccessFrom, redisAccessFrom } from "./domain/auth-files.js";
import { outputFormat } from "./domain/format.js";
import { notConnected, unreachable, usageError } from "./errors.js";
import { type Printer, printer } from "./output.js";
import { closingWhatFails } from "./own-sockets.js";
import { readStackFile, stackFilePath } from "./stack-file.js";
import { type ConnectionFlags, resolveTargets, type Targets } from "./targets.js";

/** csictl connects to NATS as the admin role (docs/security.md). */
const ADMIN: NatsRole = { kind: "admin" };

/** The repository's own run directory, where `npm start` writes stack.json unless RUN_DIR says otherwise. */
const DEFAULT_RUN_DIR = path.resolve(import.meta.dirname, "../../../run");

export interface GlobalOptions extends ConnectionFlags {
  json?: boolean;
  output?: string;
  /** false with --no-headers. */
  headers?: boolean;
  cluster?: string;
  /** Milliseconds, checked as the options are parsed (options.ts, timeoutOption). */
  timeout: number;
}

export class Session {
  readonly out: Printer;
  readonly targets: Targets;
  readonly timeoutMs: number;
  /** One connection per NATS role used (csictl is the admin role; `log import` writes as the cluster's journal). */
  readonly #nats = new Map<string, Promise<NatsConnection>>();
  /** One connection per Redis user of the stack's auth directory used (the journal's; the admin's for `redis load-functions`). */
  readonly #redis = new Map<string, Promise<Redis>>();
  #clusters?: Clusters;
  readonly #clients: { close(): void }[] = [];

  constructor(readonly opts: GlobalOptions) {
    this.out = printer(outputFormat(opts), opts.headers !== false);
    this.timeoutMs = opts.timeout;
    const runDir = process.env.RUN_DIR ? path.resolve(process.env.RUN_DIR) : DEFAULT_RUN_DIR;
    this.targets = resolveTargets(opts, process.env, readStackFile(stackFilePath(runDir)), process.cwd());
  }

  #need(what: "natsUrl" | "redisUrl" | "controllerEndpoint" | "nodeEndpoint", flag: string, label: string): string {
    const v = this.targets[what];
    if (!v) throw unreachable(`no ${label} to connect to: ${this.targets.noStack ?? "no stack file"}; or pass ${flag}`);
    return v;
  }

  /** Access settings (or the stack's auth files) as connect options; a bad setting is a usage error. */
  #access<T>(build: () => T): T {
    try {
      return build();
    } catch (err) {
      if (err instanceof AccessError || (err as NodeJS.ErrnoException).code === "ENOENT") throw usageError((err as Error).message);
      throw err;
    }
  }

  /** A connection as `role`: its credentials from `authDir` (an auth init directory), else as the targets say. */
  nats(role: NatsRole = ADMIN, authDir?: string): Promise<NatsConnection> {
    const url = this.#need("natsUrl", "--nats", "NATS server");
    const key = JSON.stringify([role, authDir]);
    const open = this.#nats.get(key);
    if (open) return open;
    const { natsAccess } = this.targets;
    const natsAuthDir = authDir ?? this.targets.natsAuthDir;
    const opts = this.#access(() =>
      natsConnectOptions(
        { natsUrl: url, ...(natsAuthDir ? natsAccessFrom(natsAuthDir, role) : natsAccess) },
        { name: "csictl", timeout: this.timeoutMs, maxReconnectAttempts: 0, inboxPrefix: inboxPrefix(role) },
      ),
    );
    const nc = closingWhatFails(() => connectNats(opts)).catch((err: unknown) => {
      const why = (err as Error).name === "TimeoutError" ? `no answer within ${this.timeoutMs} ms (--timeout)` : (err as Error).message;
      throw unreachable(`cannot reach NATS at ${redactUrl(url)}: ${why}`, err);
    });
    this.#nats.set(key, nc);
    return nc;
  }

  /** Whether NATS runs the account layout (docs/security.md): a locked-down stack's, or NATS_ACCOUNTS=1. */
  accounts(): boolean {
    return !!this.targets.natsAuthDir || (this.targets.natsAccess as { natsAccounts?: unknown } | undefined)?.natsAccounts === "1";
  }

  /** Where the node fleet's streams are reached from csictl's account. */
  fleet(): FleetAccess {
    return fleetAccess(this.accounts());
  }

  /** The JetStream API prefix csictl reads a cluster's log through: undefined on one account, the read API it imports in the layout. */
  logApi(cluster: string): string | undefined {
    return this.accounts() ? clusterLogApi(cluster) : undefined;
  }

  /** A JetStream manager for reading a cluster's log. */
  async logManager(cluster: string): Promise<JetStreamManager> {
    const apiPrefix = this.logApi(cluster);
    return jetstreamManager(await this.nats(), apiPrefix ? { apiPrefix, checkAPI: false } : {});
  }

  /** A cluster's event log, read as csictl (admin) reads it (request names of the clusters file's instance, when it names the cluster). */
  async eventLog(cluster: string): Promise<EventLog> {
    const apiPrefix = this.logApi(cluster);
    const instance = this.clusters().clusters.find((c) => c.clusterID === cluster)?.instance;
    return new EventLog(await this.nats(), { cluster, ...(instance ? { instance } : {}), ...(apiPrefix ? { apiPrefix } : {}) });
  }

  /**
   * Redis as the journal's user (the projection), or as `user` (the admin, for `redis
   * load-functions`) when the running stack's auth directory is used; credentials given in the
   * environment (REDIS_USERNAME, …) are used as they are, whatever the command.
   */
  redis(user?: string): Promise<Redis> {
    const url = this.#need("redisUrl", "--redis", "Redis server");
    const { redisAuthDir, redisAccess } = this.targets;
    const given: RedisAccess = { redisUrl: url, ...(redisAuthDir ? redisAccessFrom(redisAuthDir, user) : redisAccess) };
    const access = this.#access(() => redisConnectOptions(given));
    const key = given.redisUsername ?? "";
    const open = this.#redis.get(key);
    if (open) return open;
    const connected = (async () => {
      const r = new Redis(url, {
        ...access,
        lazyConnect: true,
        connectTimeout: this.timeoutMs,
        maxRetriesPerRequest: 1,
        retryStrategy: () => null,
        enableAutoPipelining: true,
      });
      r.on("error", () => {}); // a failed connect rejects connect() below; later errors reject their commands
      try {
        await r.connect();
      } catch (err) {
        r.disconnect();
        throw unreachable(`cannot reach Redis at ${describeRedis(given)}: ${(err as Error).message}`, err);
      }
      return r;
    })();
    this.#redis.set(key, connected);
    return connected;
  }

  async journal(): Promise<JournalClient> {
    return new JournalClient(await this.nats(), this.timeoutMs);
  }

  /** A CSI client: Node calls go to the node-agent's endpoint, every other service to the controller's. */
  csi<S extends CsiService>(service: S): CsiClient<S> {
    const endpoint =
      service === "Node"
        ? this.#need("nodeEndpoint", "--node-endpoint", "node-agent endpoint")
        : this.#need("controllerEndpoint", "--endpoint", "controller endpoint");
    let client: CsiClient<S>;
    try {
      client = csiClient(endpoint, service);
    } catch (err) {
      throw usageError(err instanceof DriverError ? err.message : String(err));
    }
    this.#clients.push(client);
    return this.#bounded(client, endpoint);
  }

  /** Every method of a CSI client, bounded by the timeout; a connection failure names the endpoint. */
  #bounded<S extends CsiService>(client: CsiClient<S>, endpoint: string): CsiClient<S> {
    const timeoutMs = this.timeoutMs;
    return new Proxy(client, {
      get(target, prop, receiver) {
        const f = Reflect.get(target, prop, receiver) as unknown;
        if (typeof f !== "function" || prop === "close") return f;
        return async (...args: unknown[]) => {
          let timer: NodeJS.Timeout | undefined;
          const late = new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(unreachable(`no answer from ${endpoint} within ${timeoutMs} ms`)), timeoutMs);
          });
          try {
            return await Promise.race([(f as (...a: unknown[]) => Promise<unknown>)(...args), late]);
          } catch (err) {
            const e = err as { code?: number; details?: string };
            const reason = e.code === 14 ? notConnected(e.details ?? "") : undefined;
            if (reason !== undefined) throw unreachable(`cannot reach the CSI endpoint ${endpoint}: ${reason}`, err);
            throw err;
          } finally {
            clearTimeout(timer);
          }
        };
      },
    });
  }

  clusters(): Clusters {
    if (!this.#clusters) {
      try {
        this.#clusters = loadClusters(this.targets.clustersFile, this.targets.dataDir);
      } catch (err) {
        throw usageError(`clusters file ${this.targets.clustersFile}: ${(err as Error).message.split("\n")[0]}`);
      }
    }
    return this.#clusters;
  }

  /**
   * A CSI volume or snapshot id given with --cluster must be of that cluster: the id names its
   * cluster, and a --cluster that says otherwise is a mistake caught before anything is sent.
   */
  inCluster(id: string): void {
    const c = this.opts.cluster;
    if (c === undefined) return;
    let of: string;
    try {
      of = decomposeVolumeId(id).clusterID;
    } catch {
      return; // a malformed id is its command's to refuse
    }
    if (of !== c) throw usageError(`${id} is of cluster ${of}, not ${c} (--cluster)`);
  }

  /** The cluster --cluster names (default: the clusters file's default cluster). */
  cluster(id = this.opts.cluster): ResolvedCluster {
    const clusters = this.clusters();
    const c = clusters.get(id ?? clusters.defaultCluster);
    if (!c) throw usageError(`unknown cluster ${JSON.stringify(id)}; known: ${clusters.clusters.map((x) => x.clusterID).join(", ")}`);
    return c;
  }

  async close(): Promise<void> {
    for (const c of this.#clients) c.close();
    for (const p of this.#nats.values()) await (await p.catch(() => undefined))?.close().catch(() => {});
    for (const p of this.#redis.values()) (await p.catch(() => undefined))?.disconnect();
  }
}
