/**
 * The compose phase: `docker compose up --build --wait` with the repository's docker-compose.yml
 * (project csi-e2e), then a CSI round trip through the sockets it puts in ./run, as a CO runs one:
 * CreateVolume, ControllerPublishVolume, NodeStageVolume and NodePublishVolume under
 * /var/lib/kubelet, a file written inside the node-agent's container and read on the host (the
 * rshared kubelet mount carries the mount out), then NodeUnpublish, NodeUnstage, ControllerUnpublish
 * and DeleteVolume; `csictl verify` is clean afterwards.
 *
 * /var/lib/kubelet must be a shared mount for the compose file's `:rshared` bind ("not a shared
 * mount" otherwise, where / is private): `sharedKubeletDir` makes it one (a bind mount of the
 * directory on itself, made shared) when it is not, and undoes exactly that.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { GrpcCode } from "@csi/contracts";
import { csiClient } from "@csi/runtime";
import { mountsLeftUnder, ROOT } from "@csi/testkit";
import { until } from "../ha-servers.js";
import type { Engine } from "./engine.js";
import { type RunOptions, say, sh } from "./sh.js";

export const PROJECT = "csi-e2e";
export const COMPOSE_NODE_ID = "e2e-compose";
export const KUBELET = "/var/lib/kubelet";
const MiB = 1024 * 1024;

/** Makes /var/lib/kubelet a shared mount if it is not one; returns the undo. */
export async function sharedKubeletDir(): Promise<() => Promise<void>> {
  const created = !existsSync(KUBELET);
  await mkdir(KUBELET, { recursive: true });
  const propagation = (await sh("findmnt", ["-no", "PROPAGATION", "--target", KUBELET])).stdout.trim();
  const shared = propagation.includes("shared");
  if (!shared) {
    say(`${KUBELET} is on a ${propagation} mount: bind-mounting it on itself, made shared (docs/deploy.md)`);
    await sh("mount", ["--bind", KUBELET, KUBELET]);
    await sh("mount", ["--make-shared", KUBELET]);
  }
  return async () => {
    if (!shared) await sh("umount", [KUBELET]);
    if (created) await removeUnmounted(KUBELET);
  };
}

/** Removes `dir` unless something is still mounted under it (rm -r would go into the mount). */
async function removeUnmounted(dir: string): Promise<void> {
  const left = await mountsLeftUnder(dir);
  if (left.length > 0) throw new Error(`not removing ${dir}: still mounted there: ${left.map((m) => m.mountPoint).join(", ")}`);
  await rm(dir, { recursive: true, force: true });
}

export function compose(engine: Engine, args: readonly string[], o: RunOptions = {}) {
  const env = { ...engine.env, NODE_ID: COMPOSE_NODE_ID, LOG_LEVEL: "info" };
  return sh("docker", ["compose", "-p", PROJECT, "-f", path.join(ROOT, "docker-compose.yml"), ...args], { cwd: ROOT, env, ...o });
}

export async function composeUp(engine: Engine): Promise<void> {
  await compose(engine, ["up", "--detach", "--build", "--wait", "--wait-timeout", "180"], { timeoutMs: 600_000 });
  say(`compose up: ${(await compose(engine, ["ps", "--format", "{{.Service}} {{.Status}}"])).stdout.trim().split("\n").join("; ")}`);
}

/**
 * `csictl verify` inside a journal container (its NATS, Redis and clusters file): exit 0, nothing
 * found. Asked again for a while when it finds something: a node's registration (what it holds)
 * is re-sent every HEARTBEAT_MS (10 s), so a volume let go just now may still be listed once.
 */
export async function verifyClean(engine: Engine): Promise<void> {
  let last = "";
  await until(
    "csictl verify clean",
    async () => {
      const r = await compose(engine, ["exec", "-T", "journal", "node", "tools/csictl/dist/main.js", "verify"], { allowFail: true });
      last = `${r.stdout}${r.stderr}`;
      return r.code === 0;
    },
    30_000,
  ).catch(() => assert.fail(`csictl verify found something:\n${last}`));
  say(`csictl verify: clean (${last.trim().split("\n").at(-1)})`);
}

/** DeleteVolume, asked again while the node's reports of letting go are on their way (FAILED_PRECONDITION), as a CO does. */
export async function deleteVolume(ctl: ReturnType<typeof csiClient<"Controller">>, id: string): Promise<void> {
  await until(
    `DeleteVolume ${id}`,
    () =>
      ctl.DeleteVolume({ volume_id: id }).then(
        () => true,
        (e: { code?: number }) => {
          if (e.code === GrpcCode.FAILED_PRECONDITION) return false;
          throw e;
        },
      ),
    30_000,
  );
}

/**
 * The first CreateVolume, asked again while it is UNAVAILABLE, as a CO does: compose's --wait and
 * the sockets' Probe know that the controller runs, not that a journal has subscribed yet (a first
 * start on a cold machine: "no journal answers for cluster local").
 */
async function firstCreate(ctl: ReturnType<typeof csiClient<"Controller">>, req: Parameters<ReturnType<typeof csiClient<"Controller">>["CreateVolume"]>[0]) {
  let volume: { volume_id?: string } | undefined;
  await until(
    `CreateVolume ${req.name}`,
    () =>
      ctl.CreateVolume(req).then(
        (r) => {
          volume = r.volume ?? undefined;
          return true;
        },
        (e: { code?: number }) => {
          if (e.code === GrpcCode.UNAVAILABLE) return false;
          throw e;
        },
      ),
    60_000,
  );
  return volume;
}

/** Until the controller's and the node-agent's sockets in ./run answer Probe ready (compose's --wait knows only that they run). */
async function socketsAnswer(sockets: string[]): Promise<void> {
  for (const socket of sockets) {
    const id = csiClient(socket, "Identity");
    try {
      await until(
        `${socket} answering Probe ready`,
        async () => (await id.Probe({}, undefined, { deadline: Date.now() + 2_000 })).ready?.value === true,
        60_000,
      );
    } finally {
      id.close();
    }
  }
}

export async function roundTrip(engine: Engine): Promise<void> {
  const [ctlSocket, nodeSocket] = ["csi-controller.sock", "csi-node.sock"].map((f) => `unix://${path.join(ROOT, "run", f)}`) as [string, string];
  await socketsAnswer([ctlSocket, nodeSocket]);
  const ctl = csiClient(ctlSocket, "Controller");
  const node = csiClient(nodeSocket, "Node");
  const name = `e2e-${process.pid}`;
  const cap = { access_mode: { mode: "SINGLE_NODE_WRITER" as const }, mount: { fs_type: "ext4", mount_flags: [] } };
  const staging = path.join(KUBELET, "plugins/kubernetes.io/csi/e2e", name, "globalmount");
  const target = path.join(KUBELET, "pods", name, "volumes/kubernetes.io~csi", name, "mount");
  try {
    const v = await firstCreate(ctl, { name, volume_capabilities: [cap], capacity_range: { required_bytes: String(32 * MiB) } });
    assert.ok(v?.volume_id, "CreateVolume gave a volume id");
    const id = v.volume_id;
    const pub = await ctl.ControllerPublishVolume({ volume_id: id, node_id: COMPOSE_NODE_ID, volume_capability: cap, readonly: false });
    const ctx = pub.publish_context;
    // The CO makes the parents of the staging and target paths (as the kubelet does).
    for (const p of [staging, target]) await mkdir(path.dirname(p), { recursive: true });
    await node.NodeStageVolume({ volume_id: id, staging_target_path: staging, volume_capability: cap, publish_context: ctx });
    await node.NodePublishVolume({
      volume_id: id,
      staging_target_path: staging,
      target_path: target,
      volume_capability: cap,
      readonly: false,
      publish_context: ctx,
    });
    await compose(engine, ["exec", "-T", "node-agent", "sh", "-c", `echo written-in-the-container > '${target}/hello'`]);
    assert.equal(await readFile(path.join(target, "hello"), "utf8"), "written-in-the-container\n", "the host reads the file through the kubelet mount");
    say(`round trip: ${id} staged and published; the host reads ${target}/hello`);
    await node.NodeUnpublishVolume({ volume_id: id, target_path: target });
    await node.NodeUnstageVolume({ volume_id: id, staging_target_path: staging });
    await ctl.ControllerUnpublishVolume({ volume_id: id, node_id: COMPOSE_NODE_ID });
    await deleteVolume(ctl, id);
    const left = await mountsLeftUnder(KUBELET);
    assert.deepEqual(
      left.map((m) => m.mountPoint).filter((p) => p !== KUBELET),
      [],
      "nothing of the volume is mounted under the kubelet dir",
    );
    say("round trip: unpublished, unstaged, controller-unpublished, deleted");
  } finally {
    ctl.close();
    node.close();
    await removeUnmounted(path.join(KUBELET, "pods", name));
    await removeUnmounted(path.join(KUBELET, "plugins/kubernetes.io/csi/e2e"));
  }
}
