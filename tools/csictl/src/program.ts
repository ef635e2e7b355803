/**
 * csictl's commands (commander): every command has --help; usage errors exit 2 with one line;
 * errors of the work itself are explained by errors.ts. Each action gets a Session (the
 * connections, opened on first use) and closes it at the end.
 */
import { Argument, Command, CommanderError, Option } from "commander";
import { OUTPUT_FORMATS, outputFormat } from "./domain/format.js";
import { EXIT, usageError } from "./errors.js";
import { MAX_TIMEOUT_MS, timeoutOption } from "./options.js";
import type { GlobalOptions, Session } from "./session.js";

export const VERSION = "0.1.0";

// biome-ignore lint/suspicious/noExplicitAny: commander hands actions its parsed arguments untyped
type Action = (s: Session, ...args: any[]) => Promise<unknown>;

/** The path of a command as typed ("volume create"). */
const pathOf = (cmd: Command): string => (cmd.parent?.parent ? `${pathOf(cmd.parent)} ${cmd.name()}` : cmd.name());

/**
 * A commander action: the command's own arguments and options, run in a Session; its number is
 * the exit status. The command modules (and the gRPC, NATS and Redis clients behind them) are
 * loaded only when a command runs, so that --help and usage errors answer at once. Before anything
 * is sent: `-o name` only where the command prints object ids (`names`), and a --cluster that no
 * cluster of the clusters file has is a usage error, whatever the command.
 */
function act(f: Action, o: { names?: boolean } = {}) {
  return async (...params: unknown[]) => {
    const cmd = params[params.length - 1] as Command;
    const opts = cmd.optsWithGlobals() as GlobalOptions;
    if (outputFormat(opts) === "name" && !o.names) throw usageError(`-o name: ${pathOf(cmd)} prints no object names (-o json or -o yaml)`);
    const { Session } = await import("./session.js");
    const session = new Session(opts);
    try {
      if (opts.cluster !== undefined) session.cluster();
      const code = await f(session, ...params.slice(0, -1));
      process.exitCode = typeof code === "number" ? code : EXIT.ok;
    } finally {
      await session.close();
    }
  };
}

const csi = () => import("./commands/csi.js");

/** Access modes as typed on the command line: CSI's names in lower case with dashes. */
const ACCESS_MODES = [
  "single-node-writer",
  "single-node-reader-only",
  "multi-node-reader-only",
  "multi-node-single-writer",
  "multi-node-multi-writer",
  "single-node-single-writer",
  "single-node-multi-writer",
];

/**
 * `--fs` choices: the contracts' SUPPORTED_FS, written here so that --help need not load the
 * contracts (tools/csictl/src/domain/domain.test.ts holds the two equal).
 */
export const FILESYSTEMS = ["ext4", "xfs"];

/** A repeatable option's values (undefined until the first one: no `(default: [])` in the help). */
export const collect = (value: string, previous: string[] | undefined) => [...(previous ?? []), value];

const requestIdOption = () => new Option("--request-id <id>", "request id sent as x-request-id (default: csictl-<uuid>); the events and reports name it");

export function buildProgram(): Command {
  const program = new Command("csictl")
    .description("The command-line tool of the CSI event driver: volumes, snapshots, history, replay, verify, gc, rebuild, clusters, nodes, auth, redis.")
    .version(VERSION)
    .exitOverride()
    .configureOutput({
      outputError: (str, write) =>
        write(
          `csictl: ${str
            .replace(/^error: /, "")
            .trimEnd()
            .replaceAll("\n", " ")}\n`,
        ),
    })
    // Every subcommand's --help shows these too (commander copies the setting to the commands made after it).
    .configureHelp({ showGlobalOptions: true })
    .showSuggestionAfterError()
    .addOption(
      new Option("-o, --output <format>", "json, yaml, wide (a table with more columns) or name (ids only, one a line); default: a table").choices(
        OUTPUT_FORMATS,
      ),
    )
    .option("--json", "the same as -o json")
    .option("--no-headers", "tables without their header row")
    .option("--nats <url>", "NATS server (default: NATS_URL, else the running stack's run/stack.json)")
    .option("--redis <url>", "Redis server (default: REDIS_URL, else the running stack's)")
    .option("--endpoint <endpoint>", "the controller's CSI endpoint, unix:///path or tcp://host:port (default: CSI_ENDPOINT, else the stack's)")
    .option("--node-endpoint <endpoint>", "the node-agent's CSI endpoint for Node calls (default: CSI_NODE_ENDPOINT, else the stack's)")
    .option("--cluster <id>", "storage cluster: the one a command works on, or the only one a list shows (default: the clusters file's default cluster)")
    .option("--clusters-file <file>", "clusters file (default: CLUSTERS_FILE, else the stack's, else the built-in single cluster)")
    .option("--timeout <ms>", `how long to wait for any server to answer, 1 to ${MAX_TIMEOUT_MS}`, timeoutOption, 30000)
    .addHelpText(
      "after",
      "\nExit status: 0 ok, 1 the operation failed or a check found something, 2 usage, 3 a server is unreachable, 141 the reader of the output went away (as by SIGPIPE).\nSee docs/csictl.md.",
    );
  nodeCommands(program, volumeCommands(program));
  snapshotCommands(program);
  auditCommands(program);
  operatorCommands(program);
  completionCommand(program);
  return program;
}

function volumeCommands(program: Command): Command {
  const volume = program.command("volume").description("create, inspect, expand and delete volumes through the CSI endpoint");
  volume
    .command("create")
    .description("CreateVolume: a new volume (or the existing one of that name, if it matches); several names, or -f, create many over one connection")
    .argument("[names...]", "request names (idempotency keys, e.g. pvc-1234)")
    .option("-f, --filename <file>", "also every name of this file, one a line (- for stdin; # comments)")
    .option("--concurrency <n>", "with several names: at most n CreateVolume calls at once (default 16)")
    .requiredOption("--size <size>", "capacity, e.g. 8Mi, 1Gi, 500M")
    .option("--limit <size>", "largest acceptable capacity")
    .addOption(new Option("--mode <mode>", "access mode").choices(ACCESS_MODES).default("single-node-writer"))
    .option("--block", "a raw block volume (no filesystem)")
    .addOption(new Option("--fs <type>", "filesystem made on first stage").choices(FILESYSTEMS))
    .option("--param <key=value>", "StorageClass parameter (repeatable)", collect)
    .option("--pool <pool>", "pool of the cluster (default: its default pool)")
    .option("--from-snapshot <snapshot-id>", "restore from a snapshot")
    .option("--from-volume <volume-id>", "clone a volume")
    .addOption(new Option("--request-id <id>", "request id sent as x-request-id (default: csictl-<uuid>; with several names: <id>-<n>)"))
    .action(
      act(
        async (s, names: string[], o) => {
          const bulk = await import("./commands/bulk.js");
          if (bulk.isBulk(names, o)) return bulk.volumeCreateMany(s, names, o);
          return (await csi()).volumeCreate(s, names[0] as string, o);
        },
        { names: true },
      ),
    );
  volume
    .command("get")
    .description("ControllerGetVolume: size, where it is published, its condition")
    .argument("<volume-id>")
    .action(act(async (s, id) => (await csi()).volumeGet(s, id), { names: true }));
  volume
    .command("list")
    .description("ListVolumes: every volume of every cluster, or of --cluster (all pages, unless --max-entries)")
    .option("--max-entries <n>", "one page of at most n entries, with the token of the next")
    .option("--starting-token <token>", "go on from a token a page gave")
    .action(act(async (s, o) => (await csi()).volumeList(s, o), { names: true }));
  volume
    .command("expand")
    .description("ControllerExpandVolume: grow a volume")
    .argument("<volume-id>")
    .requiredOption("--size <size>", "new capacity, e.g. 16Mi")
    .addOption(requestIdOption())
    .action(act(async (s, id, o) => (await csi()).volumeExpand(s, id, o), { names: true }));
  volume
    .command("delete")
    .description("DeleteVolume (refused while a node holds a claim on it); a volume the controller does not know is NotFound (exit 1)")
    .argument("<volume-id>")
    .option("--ignore-not-found", "a volume that does not exist is no error (exit 0, nothing sent)")
    .addOption(requestIdOption())
    .action(act(async (s, id, o) => (await csi()).volumeDelete(s, id, o), { names: true }));
  volume
    .command("adopt")
    .description("record a volume for an image no record names that an operator says is live (after a log restore: a volume created since the backup)")
    .argument("<image>", "the image's name in its pool (csi-vol-<uuid>)")
    .requiredOption("--name <name>", "the request name to record it under (a PVC's, e.g. pvc-1234)")
    .option("--pool <pool>", "pool of the cluster (default: its default pool)")
    .addOption(new Option("--mode <mode>", "access mode").choices(ACCESS_MODES).default("single-node-writer"))
    .option("--block", "a raw block volume (no filesystem)")
    .option("--fs <type>", "its filesystem (ext4, xfs)")
    .option("--param <key=value>", "StorageClass parameter (repeatable)", collect)
    .addOption(requestIdOption())
    .action(act(async (s, image, o) => (await import("./commands/adopt.js")).volumeAdopt(s, image, o), { names: true }));
  return volume;
}

/** A node's claims and registration: `volume detach` (nomad volume detach), `node remove` (nomad node purge, kubectl delete node). */
function nodeCommands(program: Command, volume: Command): void {
  const node = () => import("./commands/node.js");
  volume
    .command("detach")
    .description("release a node's claim on a volume (the journal's ControllerUnpublishVolume for that node), e.g. a stale claim verify reports")
    .argument("<volume-id>", "a volume id, or a live volume's request name, uuid, unique prefix or namespace/pvc")
    .argument("<node-id>", "the node whose claim to release")
    .addOption(requestIdOption())
    .action(act(async (s, id, nodeId, o) => (await node()).volumeDetach(s, id, nodeId, o)));
  program
    .command("node")
    .description("one node-agent's registration")
    .command("remove")
    .description("forget a node: its registration removed, so nodes no longer lists it (refused while it is healthy or holds claims, unless --force)")
    .argument("<node-id>")
    .option("--force", "remove it even if it heartbeats or holds claims (the claims stay: volume detach releases them)")
    .option("--auth-dir <dir>", "in the NATS account layout: an auth init directory whose fleet user removes it (default: the running stack's)")
    .action(act(async (s, nodeId, o) => (await node()).nodeRemove(s, nodeId, o)));
}

function snapshotCommands(program: Command): void {
  const snapshot = program.command("snapshot").description("create, list and delete snapshots through the CSI endpoint");
  snapshot
    .command("create")
    .description("CreateSnapshot of a volume")
    .argument("<name>", "request name")
    .requiredOption("--source <volume-id>", "the volume to snapshot")
    .option("--param <key=value>", "VolumeSnapshotClass parameter (repeatable)", collect)
    .addOption(requestIdOption())
    .action(act(async (s, name, o) => (await csi()).snapshotCreate(s, name, o), { names: true }));
  snapshot
    .command("list")
    .description("ListSnapshots (all pages, unless --max-entries)")
    .option("--source <volume-id>", "only snapshots of this volume")
    .option("--id <snapshot-id>", "only this snapshot")
    .option("--max-entries <n>", "one page of at most n entries")
    .option("--starting-token <token>", "go on from a token a page gave")
    .action(act(async (s, o) => (await csi()).snapshotList(s, o), { names: true }));
  snapshot
    .command("delete")
    .description("DeleteSnapshot; a snapshot the controller does not know is NotFound (exit 1)")
    .argument("<snapshot-id>")
    .option("--ignore-not-found", "a snapshot that does not exist is no error (exit 0, nothing sent)")
    .addOption(requestIdOption())
    .action(act(async (s, id, o) => (await csi()).snapshotDelete(s, id, o), { names: true }));

  program
    .command("call")
    .description(
      "any CSI RPC with a proto3 JSON request (lowerCamelCase or proto names; an unknown field is a usage error, nothing sent); prints the proto3 JSON answer (Node calls go to the node endpoint)",
    )
    .argument("<Service.Method>", "e.g. Controller.ListVolumes, Node.NodeGetInfo, Identity.Probe")
    .argument("[json]", 'the request, e.g. \'{"volumeId":"…"}\' (default: {})')
    .addOption(requestIdOption())
    .action(act(async (s, target, body, o) => (await csi()).call(s, target, body, o)));

  program
    .command("history")
    .description("the timeline of a volume, snapshot or request name: every event and device report in order")
    .argument("<id-or-name>", "a CSI volume or snapshot id, a uuid (with --cluster), or a request name")
    .option("--name", "take the argument as a request name, whatever it looks like")
    .option("-f, --follow", "then watch new events live until Ctrl-C (with -o json: one JSON object per line)")
    .action(act(async (s, arg, o) => (await import("./commands/history.js")).history(s, arg, o)));
}

function auditCommands(program: Command): void {
  program
    .command("rebuild")
    .description("drop the cluster's Redis projection and rebuild it from the event log (journals keep serving)")
    .action(act(async (s) => (await import("./commands/rebuild.js")).rebuild(s)));

  const audit = () => import("./commands/audit.js");
  program
    .command("replay")
    .description("the state of the cluster (its live volumes and snapshots) or of one volume/snapshot at a point of the log, built from the log alone")
    .argument("[id]", "a CSI volume or snapshot id, or a uuid (with --cluster); none: the whole cluster")
    .requiredOption("--at <point>", "a stream sequence (the state after that event) or an ISO time (the state after the last event not later)")
    .action(act(async (s, id, o) => (await audit()).replay(s, id, o), { names: true }));

  program
    .command("verify")
    .description("log vs Redis projection vs pools: leaked images, orphaned reservations, missing images, drift, stale claims (exit 1 if any)")
    .option("--older-than <duration>", "a reservation without an image counts as orphaned after this, e.g. 10m, 2h, 1d (default: 10m)")
    .option("--max-findings <n>", "list at most n findings (the counts are complete; default 100)")
    .action(act(async (s, o) => (await audit()).verify(s, o)));

  program
    .command("gc")
    .description("clean what verify finds (leaked images, orphaned reservations): a dry run unless --apply; every action is an event in the log")
    .option("--apply", "act: remove the images and collect the reservations (default: only list what would be done)")
    .option("--older-than <duration>", "only leaked images and reservations older than this, e.g. 15m, 2h, 1d (default: 15m)")
    .option("--max-actions <n>", "at most n actions in one run (default 1000)")
    .option("--yes", `with --apply: remove more than ${10} at once`)
    .addOption(requestIdOption())
    .action(act(async (s, o) => (await audit()).gc(s, o)));
}

function operatorCommands(program: Command): void {
  logCommands(program);
  statusCommands(program);
  credentialCommands(program);
}

/** `log export|import|restore|purge-foreign`: the event log's backup and restore. */
function logCommands(program: Command): void {
  const log = () => import("./commands/log.js");
  const logCmd = program.command("log").description("backup and restore of a cluster's event log, the source of truth (docs/operations.md)");
  const keyFileOption = () =>
    new Option(
      "--key-file <file>",
      "the backup key (at least 32 bytes; a Secret's file): an HMAC-SHA-256 seals the backup with it (default: the file CSICTL_BACKUP_KEY_FILE names)",
    );
  logCmd
    .command("export")
    .description("write the cluster's whole event log to a new file (JSON lines sealed by an HMAC under the backup key), while journals keep serving")
    .argument("<file>", "the backup file to create (must not exist), or - for stdout")
    .addOption(keyFileOption())
    .action(act(async (s, file, o) => (await log()).logExport(s, file, o)));
  const restores = [
    [
      "import",
      "logImport",
      "restore a backup into the cluster's empty (or absent) event log, every event on its old sequence, all checked first; journals must be stopped",
    ],
    [
      "restore",
      "logRestore",
      "replace the cluster's event log with a backup: a dry run first (how it differs from the pools); --apply, with journals stopped: checked whole, staged, then written on its old sequences",
    ],
  ] as const;
  for (const [name, run, description] of restores) {
    const cmd = logCmd
      .command(name)
      .description(description)
      .argument("<file>", "a file made by log export, or - for stdin")
      .addOption(keyFileOption())
      .option("--insecure-no-mac", "take a backup that cannot be authenticated (exported without a key, or this key is not at hand)")
      .option("--replicas <n>", "stream replicas of the log made (default: those of the log there, else 1; 3 on a NATS cluster)");
    if (name === "restore") cmd.option("--apply", "act: replace the log (default: a dry run that checks the backup and lists how it differs from the pools)");
    cmd.action(act(async (s, file, o) => (await log())[run](s, file, o)));
  }
  logCmd
    .command("purge-foreign")
    .description(
      "remove foreign records (not events of a journal: verify lists them) from the cluster's event log, each read again first; a dry run unless --apply",
    )
    .option("--seq <n>", "this stream sequence (repeatable; default: every foreign record verify finds)", collect)
    .option("--apply", "act: remove them (default: only list what would be removed)")
    .addOption(requestIdOption())
    .action(act(async (s, o) => (await log()).logPurgeForeign(s, o)));
}

/** `clusters`, `nodes`: who serves and who is healthy. */
function statusCommands(program: Command): void {
  program
    .command("clusters")
    .description("per cluster: journal replicas answering, log sequence, projection watermark and lag (exit 1 if one is not served)")
    .action(act(async (s) => (await import("./commands/clusters.js")).clusters(s), { names: true }));

  program
    .command("nodes")
    .description("per node-agent: healthy or not, last heartbeat; healthy/expected (exit 1 if one is unhealthy)")
    .action(act(async (s) => (await import("./commands/nodes.js")).nodes(s), { names: true }));
}

/** `redis load-functions`, `auth init`, `fleet init`: what a locked-down NATS and Redis need first. */
function credentialCommands(program: Command): void {
  program
    .command("redis")
    .description("the journal's Redis side, as the Redis admin (docs/security.md)")
    .command("load-functions")
    .description("load the journal's Redis function library (FUNCTION LOAD REPLACE of csi_journal_v<N>); the journal's own user may only call it")
    .option("--prune", "also delete the csi_journal_v* libraries of other versions (once no journal of theirs runs)")
    .action(act(async (s, o) => (await import("./commands/redis.js")).loadFunctions(s, o)));

  const auth = program.command("auth").description("credentials and permissions for locked-down NATS and Redis (docs/security.md)");
  auth
    .command("init")
    .description("generate one NATS user per role (permissions from the subjects), the Redis ACL of the journal, and their secrets (files 0600)")
    .requiredOption("--out <dir>", "where to write auth.conf, users.acl and the secrets")
    .requiredOption("--nodes <ids>", "node ids of the node-agents, comma-separated (each gets its own user)")
    .option("--clusters <ids>", "storage clusters, comma-separated (default: those of the clusters file)")
    .option("--nkeys", "nkey users (a seed file each, given as NATS_CREDS) instead of passwords")
    .option("--force", "replace the credentials already in --out")
    .action(act(async (s, o) => (await import("./commands/auth.js")).authInit(s, o)));

  program
    .command("fleet")
    .description("the FLEET account of the NATS account layout (docs/security.md)")
    .command("init")
    .description("make the node registry, node work and device report streams and every declared node's and cluster's consumer (idempotent)")
    .option("--auth-dir <dir>", "an auth init directory: its clusters and nodes, and its fleet user's credentials")
    .option("--nodes <ids>", "node ids, comma-separated (without --auth-dir; credentials from NATS_USER/NATS_PASSWORD or NATS_CREDS)")
    .option("--clusters <ids>", "storage clusters, comma-separated (default: those of the clusters file)")
    .option("--replicas <n>", "stream replicas of the streams made (default 1; 3 on a NATS cluster)")
    .action(act(async (s, o) => (await import("./commands/fleet.js")).fleetInit(s, o)));
}

function completionCommand(program: Command): void {
  program
    .command("completion")
    .description("print a shell completion script: source <(csictl completion bash), or in ~/.zshrc: source <(csictl completion zsh)")
    .addArgument(new Argument("<shell>", "the shell").choices(["bash", "zsh"]))
    .action(async (shell: "bash" | "zsh") => {
      const { completionScript } = await import("./commands/completion.js");
      process.stdout.write(completionScript(program, shell));
    });
}

/** Commander's own exits: help and version are 0, every parse error is a usage error. */
export function commanderExit(err: CommanderError): number {
  return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
}

export { CommanderError };
