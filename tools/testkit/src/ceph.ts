/**
 * A real single-node Ceph cluster for tests: one monitor, one manager, one OSD (bluestore on a
 * sparse 10 GiB file), size-1 pools, all under one temporary directory, on free ports, with a
 * private ceph.conf (nothing in /etc/ceph, no systemd). It is torn down pass or fail: the daemons
 * are SIGKILLed and the directory removed (also when the test process exits without calling stop).
 *
 *   const why = whyNoCeph();                  // a reason to skip, or undefined
 *   const ceph = await startCeph();           // in before(): ~12 s on a quiet machine
 *   ceph.monitors, ceph.user, ceph.keyFile    // what a clusters file's RBD pool names
 *   await ceph.rbd(["ls", "-l", "rbd"])       // the rbd CLI as admin, JSON parsed
 *   await ceph.stop();                        // in after()
 *
 * Start-up waits for events, never for time: the monitor's cluster log (pointed into the directory)
 * says when the OSD has booted and when the manager is active. Everything that can be made offline
 * is (keys, keyrings with their caps in the monitor's initial keyring, the monmap, an osdmap that
 * already holds osd.0), so the only commands sent to the running cluster create the pools.
 * Each daemon has its own admin socket (a global one makes clients collide); the manager loads
 * no Python modules (it starts in a second instead of ~20 s of CPU; `ceph df` needs only its core).
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { existsSync, rmSync, watch } from "node:fs";
import { chmod, mkdir, open, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { freePort } from "./local-servers.js";
import { tempDir } from "./servers.js";

const run = promisify(execFile);

/** Debian's packages the Ceph tests need (rbd-fuse is for the node side). */
export const CEPH_PACKAGES = ["ceph-mon", "ceph-osd", "ceph-mgr", "ceph-common", "python3-rbd", "rbd-fuse"] as const;
/** Debian's Python, where python3-rbd lives (a pyenv or venv python3 on the PATH does not have it). */
export const CEPH_PYTHON = "/usr/bin/python3";
const BINARIES = ["ceph-mon", "ceph-osd", "ceph-mgr", "ceph", "monmaptool", "osdmaptool", "rbd"] as const;
/** The sparse file bluestore runs on. */
const OSD_BYTES = 10 * 1024 ** 3;
/** Longest start-up step (a busy machine: mkfs and the OSD's first mount take most of it). */
const STEP_TIMEOUT_MS = 180_000;

export interface CephCluster {
  /** The directory everything lives in (removed by stop). */
  readonly dir: string;
  /** Its ceph.conf (admin keyring), for the CLI: `CEPH_CONF=<conf> rbd ls`. */
  readonly conf: string;
  /** The monitor, as a clusters file's `monitors` entry names it (msgr2 and msgr1 addresses). */
  readonly monitors: string[];
  /** The pools made at start (size 1, application rbd). */
  readonly pools: string[];
  /** A client with `profile rbd` caps (no admin rights), and the file holding its key alone (as a Secret mount would). */
  readonly user: string;
  readonly keyFile: string;
  /** Resolves once the manager is active (pool statistics, `ceph df`, need it; images do not). */
  readonly mgrActive: Promise<void>;
  /** `rbd <args>` as admin: its output. */
  rbd(args: string[]): Promise<string>;
  /** `rbd <args> --format json` as admin: the parsed JSON (`rbd ls -l`, `info`, `snap ls`, `image-meta list`, `trash ls`). */
  rbdJson(args: string[]): Promise<unknown>;
  /** `rbd <args> --format json` as the `profile rbd` user (its key file, not admin's keyring): what the driver's user sees. */
  rbdAsUser(args: string[]): Promise<unknown>;
  /** `ceph <args> --format json` as admin: the parsed JSON. */
  cephJson(args: string[]): Promise<unknown>;
  /** Bytes written into an image of a pool, at an offset (librbd, as admin). */
  writeImage(pool: string, image: string, offset: number, data: Buffer): Promise<void>;
  /** Bytes of an image (of its snapshot `snap` if given). */
  readImage(pool: string, image: string, offset: number, length: number, snap?: string): Promise<Buffer>;
  /** The daemons' pids (the bench reads their CPU). */
  pids(): Record<"mon" | "mgr" | "osd", number | undefined>;
  /** Client operations the OSD has served so far (its admin socket's `perf dump`, `osd.op`): a bench's OSD ops per create. */
  osdOps(): Promise<number>;
  /** Sends a signal to one daemon (SIGSTOP/SIGCONT: a cluster that stops answering, and back). */
  signal(daemon: "mon" | "mgr" | "osd", sig: NodeJS.Signals): void;
  /** Kill the daemons, remove the directory. Idempotent. */
  stop(): Promise<void>;
}

/** Why the Ceph tests cannot run here (after installing the packages when root may), or undefined when they can. */
export function whyNoCeph(): string | undefined {
  if (missingCeph().length === 0) return undefined;
  if (process.getuid?.() !== 0 || process.env.CSI_NO_APT === "1")
    return `Ceph is not installed (${missingCeph().join(", ")}): apt-get install ${CEPH_PACKAGES.join(" ")}`;
  const install = () => execFileSync("apt-get", ["install", "-y", "-q", "--no-install-recommends", ...CEPH_PACKAGES], { stdio: "ignore", env: aptEnv() });
  try {
    install();
  } catch {
    try {
      execFileSync("apt-get", ["update", "-q"], { stdio: "ignore", env: aptEnv() });
      install();
    } catch (err) {
      return `Ceph's Debian packages could not be installed (${(err as Error).message.split("\n")[0]})`;
    }
  }
  const left = missingCeph();
  return left.length === 0 ? undefined : `Ceph is not installed after apt-get (${left.join(", ")})`;
}

const aptEnv = () => ({ ...process.env, DEBIAN_FRONTEND: "noninteractive" });

function missingCeph(): string[] {
  const dirs = [...(process.env.PATH ?? "").split(":"), "/usr/bin", "/usr/sbin"].filter(Boolean);
  const missing: string[] = BINARIES.filter((b) => !dirs.some((d) => existsSync(path.join(d, b))));
  try {
    execFileSync(CEPH_PYTHON, ["-c", "import rados, rbd"], { stdio: "ignore" });
  } catch {
    missing.push("python3-rbd");
  }
  return missing;
}

/** A cephx secret as ceph-authtool makes it: type 1 (AES), creation time, 16 random bytes, base64. */
export function cephKey(now = Date.now()): string {
  const b = Buffer.alloc(28);
  b.writeUInt16LE(1, 0);
  b.writeUInt32LE(Math.floor(now / 1000), 2);
  b.writeUInt32LE((now % 1000) * 1e6, 6);
  b.writeUInt16LE(16, 10);
  randomBytes(16).copy(b, 12);
  return b.toString("base64");
}

interface Entity {
  name: string;
  key: string;
  caps: Record<string, string>;
}

const keyringOf = (entities: Entity[]) =>
  entities.map((e) => [`[${e.name}]`, `\tkey = ${e.key}`, ...Object.entries(e.caps).map(([k, v]) => `\tcaps ${k} = "${v}"`), ""].join("\n")).join("\n");

function cephConf(dir: string, fsid: string, monAddr: string): string {
  const d = (...p: string[]) => path.join(dir, ...p);
  return `[global]
fsid = ${fsid}
mon host = ${monAddr}
public addr = 127.0.0.1
keyring = ${d("admin.keyring")}
run dir = ${d("run")}
log file = ${d("log", "$name.log")}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
osd crush chooseleaf type = 0
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
debug rocksdb = 0/0
debug bluestore = 0/0
debug bluefs = 0/0
debug bdev = 0/0

[mon.a]
mon data = ${d("mon")}
admin socket = ${d("run", "mon.a.asok")}
mon cluster log file = ${d("log", "cluster.log")}

[mgr.x]
mgr data = ${d("mgr")}
keyring = ${d("mgr", "keyring")}
admin socket = ${d("run", "mgr.x.asok")}
mgr module path = ${d("mgr-modules")}

[osd.0]
osd data = ${d("osd0")}
keyring = ${d("osd0", "keyring")}
admin socket = ${d("run", "osd.0.asok")}
osd objectstore = bluestore
bluestore block create = true
bluestore block size = ${OSD_BYTES}
`;
}

/** Resolves when a line of `file` (read as it grows) matches `re`; rejects when `failed()` names a reason first, or after `timeoutMs`. */
function untilLine(file: string, re: RegExp, what: string, failed: () => string | undefined, from = 0, timeoutMs = STEP_TIMEOUT_MS): Promise<void> {
  return new Promise((resolve, reject) => {
    let offset = from;
    let tail = "";
    let busy = false;
    const done = (err?: Error) => {
      watcher.close();
      clearTimeout(timer);
      clearInterval(check);
      if (err) reject(err);
      else resolve();
    };
    const look = async () => {
      if (busy) return;
      busy = true;
      try {
        const fh = await open(file, "r").catch(() => undefined);
        if (fh) {
          const { size } = await fh.stat();
          const buf = Buffer.alloc(Math.max(0, size - offset));
          await fh.read(buf, 0, buf.length, offset);
          await fh.close();
          offset = size;
          const text = tail + buf.toString();
          if (re.test(text)) return done();
          tail = text.slice(-4096);
        }
        const why = failed();
        if (why) done(new Error(`ceph: ${why} before ${what}`));
      } finally {
        busy = false;
      }
    };
    const watcher = watch(path.dirname(file), () => void look());
    // A daemon that died writes nothing: its exit is looked at on the watcher's events and once a second.
    const check = setInterval(() => void look(), 1000);
    const timer = setTimeout(() => done(new Error(`ceph: no ${what} in ${timeoutMs / 1000} s (${file})`)), timeoutMs);
    void look();
  });
}

interface Daemon {
  name: string;
  child: ChildProcess;
  output: string;
}

function startDaemon(bin: string, id: string, env: NodeJS.ProcessEnv): Daemon {
  const child = spawn(bin, ["-i", id, "-f"], { env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  const d: Daemon = { name: bin, child, output: "" };
  const keep = (b: Buffer) => {
    d.output = (d.output + b.toString()).slice(-8192);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  return d;
}

const exitedOf = (d: Daemon) =>
  d.child.exitCode !== null || d.child.signalCode !== null
    ? `${d.name} exited (${d.child.exitCode ?? d.child.signalCode}): ${d.output.slice(-2000)}`
    : undefined;

/** The directory, the offline part: keys and keyrings, monmap, osdmap, the monitor's and the OSD's mkfs. */
async function prepare(dir: string, env: NodeJS.ProcessEnv, user: string): Promise<{ monitors: string[]; key: string }> {
  const [v2, v1] = [await freePort(), await freePort()];
  const monAddr = `[v2:127.0.0.1:${v2},v1:127.0.0.1:${v1}]`;
  const fsid = randomUUID();
  for (const sub of ["mon", "mgr", "osd0", "run", "log", "mgr-modules"]) await mkdir(path.join(dir, sub), { recursive: true, mode: 0o700 });
  await writeFile(path.join(dir, "ceph.conf"), cephConf(dir, fsid, monAddr));
  for (const m of ["mgr_module.py", "mgr_util.py"]) await symlink(path.join("/usr/share/ceph/mgr", m), path.join(dir, "mgr-modules", m));
  const admin = { name: "client.admin", key: cephKey(), caps: { mon: "allow *", osd: "allow *", mgr: "allow *" } };
  const mgr = { name: "mgr.x", key: cephKey(), caps: { mon: "allow profile mgr", osd: "allow *" } };
  const osd = { name: "osd.0", key: cephKey(), caps: { mon: "allow profile osd", osd: "allow *", mgr: "allow profile osd" } };
  const client = { name: `client.${user}`, key: cephKey(), caps: { mon: "profile rbd", osd: "profile rbd", mgr: "profile rbd" } };
  const mon = { name: "mon.", key: cephKey(), caps: { mon: "allow *" } };
  const secret = async (file: string, text: string) => writeFile(path.join(dir, file), text, { mode: 0o600 });
  await secret("admin.keyring", keyringOf([admin]));
  await secret("mgr/keyring", keyringOf([mgr]));
  await secret("osd0/keyring", keyringOf([osd]));
  // The monitor's initial auth database: every entity with its caps (nothing to add once it runs).
  await secret("mon.keyring", keyringOf([mon, admin, mgr, osd, client]));
  await run("monmaptool", ["--create", "--addv", "a", monAddr, "--fsid", fsid, path.join(dir, "monmap")], { env });
  await run("osdmaptool", ["--createsimple", "1", "--pg-bits", "3", "--pgp-bits", "3", path.join(dir, "osdmap")], { env });
  await Promise.all([
    run(
      "ceph-mon",
      ["--mkfs", "-i", "a", "--monmap", path.join(dir, "monmap"), "--osdmap", path.join(dir, "osdmap"), "--keyring", path.join(dir, "mon.keyring")],
      {
        env,
      },
    ),
    run("ceph-osd", ["-i", "0", "--mkfs", "--no-mon-config"], { env, maxBuffer: 64 * 1024 * 1024 }),
  ]);
  return { monitors: [monAddr], key: client.key };
}

/** A kept cluster's own record, or undefined when the directory holds no whole cluster yet (then it is made afresh). */
async function readSaved(dir: string): Promise<Saved | undefined> {
  const text = await readFile(path.join(dir, SAVED), "utf8").catch(() => undefined);
  if (text === undefined) {
    // Half made (a start cut short before the record was written): start from nothing.
    await rm(dir, { recursive: true, force: true });
    return undefined;
  }
  const s = JSON.parse(text) as Saved;
  if (!Array.isArray(s.monitors) || typeof s.user !== "string") throw new Error(`ceph: ${path.join(dir, SAVED)} is not a cluster record`);
  return s;
}

/** Pools made through the running monitor (one Python process, as admin): size 1 (the defaults), 8 PGs, application rbd. */
async function makePools(env: NodeJS.ProcessEnv, pools: string[]): Promise<void> {
  const script = `
import json, sys, rados
c = rados.Rados(rados_id="admin", conffile="${env.CEPH_CONF}", conf={"rados_mon_op_timeout": "60"})
c.connect()
for p in json.loads(sys.argv[1]):
    for cmd in ({"prefix": "osd pool create", "pool": p, "pg_num": 8, "pgp_num": 8}, {"prefix": "osd pool application enable", "pool": p, "app": "rbd"}):
        r, out, err = c.mon_command(json.dumps(cmd), b"")
        if r != 0: sys.exit("%s: %s" % (cmd["prefix"], err))
c.shutdown()
`;
  await run(CEPH_PYTHON, ["-c", script, JSON.stringify(pools)], { env, timeout: STEP_TIMEOUT_MS });
}

/** One read or write of an image's bytes through librbd, as admin (a Python process: no rbd-fuse or kernel module needed). */
async function imageIO(env: NodeJS.ProcessEnv, req: Record<string, unknown>): Promise<string> {
  const script = `
import base64, json, sys, rados, rbd
r = json.loads(sys.argv[1])
c = rados.Rados(rados_id="admin", conffile="${env.CEPH_CONF}")
c.connect()
io = c.open_ioctx(r["pool"])
with rbd.Image(io, r["image"], snapshot=r.get("snap")) as img:
    if r["op"] == "write":
        img.write(base64.b64decode(r["data"]), r["offset"])
        img.flush()
    else:
        sys.stdout.write(base64.b64encode(img.read(r["offset"], r["length"])).decode())
io.close()
c.shutdown()
`;
  return (await run(CEPH_PYTHON, ["-c", script, JSON.stringify(req)], { env, timeout: 60_000, maxBuffer: 64 * 1024 * 1024 })).stdout;
}

/** Daemons running and directories in use: a test process that exits without stopping its clusters still ends them. */
const live = new Set<Daemon>();
const dirs = new Set<string>();
process.on("exit", () => {
  for (const d of live) d.child.kill("SIGKILL");
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** What a kept cluster's directory remembers of itself (`startCeph({ dir })`): no secret, the key is in its own file. */
interface Saved {
  monitors: string[];
  user: string;
}
const SAVED = "cluster.json";

/**
 * `dir`: keep the cluster there (`npm start -- --ceph`: <dataDir>/ceph) — made on the first start,
 * started again over the same data (the same ports: the monmap holds them) on later ones; stop()
 * then ends the daemons and leaves the directory. Without it: a temporary directory, removed by stop().
 */
export async function startCeph(opts: { pools?: string[]; user?: string; dir?: string } = {}): Promise<CephCluster> {
  const why = whyNoCeph();
  if (why) throw new Error(why);
  const pools = opts.pools ?? ["rbd"];
  const kept = opts.dir !== undefined;
  const dir = opts.dir ?? (await tempDir("csi-ceph-"));
  const saved = kept ? await readSaved(dir) : undefined;
  const user = saved?.user ?? opts.user ?? "csi";
  const conf = path.join(dir, "ceph.conf");
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? "/usr/bin:/usr/sbin:/bin:/sbin", CEPH_CONF: conf };
  const daemons: Daemon[] = [];
  const stop = async () => {
    const all = daemons.splice(0);
    await Promise.all(
      all.map(async (d) => {
        live.delete(d);
        if (exitedOf(d)) return;
        const gone = new Promise((r) => d.child.once("exit", r));
        d.child.kill("SIGKILL");
        await gone;
      }),
    );
    if (kept) return;
    await rm(dir, { recursive: true, force: true });
    dirs.delete(dir);
  };
  if (!kept) dirs.add(dir);
  try {
    const keyFile = path.join(dir, "secret", "userKey");
    const monitors = saved?.monitors ?? (await createCluster(dir, env, user, keyFile, kept));
    const { mgrActive } = await bootDaemons(dir, env, pools, daemons);
    return clusterHandle({ dir, conf, monitors, pools, user, keyFile, env, daemons, mgrActive, stop });
  } catch (err) {
    await stop();
    throw err;
  }
}

/** A new cluster in `dir` (its first start): the monitors, the user's key in `keyFile`, and with `kept` the saved file. */
async function createCluster(dir: string, env: NodeJS.ProcessEnv, user: string, keyFile: string, kept: boolean): Promise<string[]> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const made = await prepare(dir, env, user);
  const monitors = made.monitors;
  await mkdir(path.dirname(keyFile), { mode: 0o700 });
  await writeFile(keyFile, made.key, { mode: 0o600 });
  await chmod(keyFile, 0o600);
  // Written last: a directory without it was never a whole cluster, and is made again.
  if (kept) await writeFile(path.join(dir, SAVED), `${JSON.stringify({ monitors, user } satisfies Saved)}\n`);
  return monitors;
}

/** Start mon, mgr and osd (into `daemons`), wait for osd.0 to boot, make the pools; `mgrActive`: when the manager is active. */
async function bootDaemons(dir: string, env: NodeJS.ProcessEnv, pools: string[], daemons: Daemon[]): Promise<{ mgrActive: Promise<void> }> {
  const clusterLog = path.join(dir, "log", "cluster.log");
  const from = await stat(clusterLog).then(
    (st) => st.size,
    () => 0,
  ); // a kept cluster's log holds its earlier starts: only what this one writes counts
  for (const [bin, id] of [
    ["ceph-mon", "a"],
    ["ceph-mgr", "x"],
    ["ceph-osd", "0"],
  ] as const) {
    const d = startDaemon(bin, id, env);
    daemons.push(d);
    live.add(d);
  }
  const anyDied = () => daemons.map(exitedOf).find(Boolean);
  const mgrActive = untilLine(clusterLog, /mgrmap e\d+: x\(active, since/, "an active manager", anyDied, from);
  mgrActive.catch(() => {}); // awaited by whoever needs it
  await untilLine(clusterLog, /osd\.0 \[.*\] boot/, "osd.0 boot", anyDied, from);
  await makePools(env, pools); // pools that exist already are left as they are
  return { mgrActive };
}

/** The running cluster as tests use it: its facts, its CLIs, its daemons. */
function clusterHandle(
  c: Pick<CephCluster, "dir" | "conf" | "monitors" | "pools" | "user" | "keyFile" | "mgrActive" | "stop"> & { env: NodeJS.ProcessEnv; daemons: Daemon[] },
): CephCluster {
  const { dir, env, daemons, user, keyFile } = c;
  const cli = async (bin: string, args: string[]) => (await run(bin, args, { env, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 })).stdout;
  const json = async (bin: string, args: string[]): Promise<unknown> => JSON.parse((await cli(bin, [...args, "--format", "json"])) || "null");
  return {
    dir,
    conf: c.conf,
    monitors: c.monitors,
    pools: c.pools,
    user,
    keyFile,
    mgrActive: c.mgrActive,
    pids: () => ({
      mon: daemons.find((d) => d.name === "ceph-mon")?.child.pid,
      mgr: daemons.find((d) => d.name === "ceph-mgr")?.child.pid,
      osd: daemons.find((d) => d.name === "ceph-osd")?.child.pid,
    }),
    osdOps: async () => {
      const dump = JSON.parse(await cli("ceph", ["--admin-daemon", path.join(dir, "run", "osd.0.asok"), "perf", "dump"])) as { osd?: { op?: number } };
      return dump.osd?.op ?? 0;
    },
    signal: (which, sig) => {
      daemons.find((d) => d.name === `ceph-${which}`)?.child.kill(sig);
    },
    rbd: (args) => cli("rbd", args),
    writeImage: async (p, image, offset, data) => void (await imageIO(env, { op: "write", pool: p, image, offset, data: data.toString("base64") })),
    readImage: async (p, image, offset, length, snap) =>
      Buffer.from(await imageIO(env, { op: "read", pool: p, image, offset, length, ...(snap ? { snap } : {}) }), "base64"),
    rbdJson: (args) => json("rbd", args),
    rbdAsUser: (args) => json("rbd", ["--id", user, "--keyfile", keyFile, ...args]),
    cephJson: (args) => json("ceph", args),
    stop: c.stop,
  };
}
