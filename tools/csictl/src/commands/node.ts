/**
 * A node's claims and its registration, for the operator (as `nomad volume detach` and `nomad node
 * purge`, `kubectl delete node`):
 *
 *  - `volume detach <volume> <node>`: the journal's volume.unpublish for that node
 *    (ControllerUnpublishVolume's rules: idempotent, the node's claim released), for a stale claim
 *    `verify` reports of a node that is gone;
 *  - `node remove <node>`: its registration purged from the CSI_NODES stream (one message per
 *    subject: the node's last heartbeat), so `nodes` no longer lists it. Refused while it is
 *    healthy or holds claims, unless --force. In the NATS account layout the registrations are the
 *    FLEET account's and csictl's own (admin) account only reads them: the purge is made as the
 *    fleet user, with the credentials of the stack's auth directory, --auth-dir, or the
 *    environment's (docs/csictl.md, "node remove").
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import { decomposeVolumeId, NODES_STREAM, type NodeHold, nodeSubjects } from "@csi/contracts";
import { fleetManager, nodeRegistration } from "@csi/runtime";
import { jetstreamManager } from "@nats-io/jetstream";
import { type NodeClaim, nodeHealth, removalRefusal } from "../domain/health.js";
import { CliError, EXIT } from "../errors.js";
import { fields } from "../output.js";
import { clusterVolumes, inScope } from "../resolve.js";
import type { Session } from "../session.js";
import { volumeIdOf } from "./csi.js";

export interface DetachOptions {
  requestId?: string;
}

/** What a node still holds of a volume by its own reports, in words. */
const holdText = (h: NodeHold) =>
  [h.staged ? `staged at ${h.staged}` : "", h.published.length ? `published at ${h.published.join(", ")}` : "", h.device ? `device ${h.device}` : ""]
    .filter(Boolean)
    .join(", ");

export async function volumeDetach(s: Session, text: string, nodeId: string, o: DetachOptions): Promise<void> {
  const id = await volumeIdOf(s, text);
  const { clusterID, poolID, uuid } = decomposeVolumeId(id);
  const r = await (await s.journal()).call(clusterID, "volume.unpublish", { requestId: o.requestId ?? `csictl-${randomUUID()}`, uuid, poolId: poolID, nodeId });
  s.out.result({ volumeId: id, nodeId, released: r.deleted, held: r.held }, () =>
    fields([
      ["VOLUME ID", id],
      ["NODE", nodeId],
      ["RELEASED", r.deleted ? "yes" : "no"],
    ]),
  );
  s.out.note(r.deleted ? `detached: the claim of ${nodeId} on ${id} is released` : `${nodeId} holds no claim on ${id}: nothing changed`);
  for (const h of r.held)
    s.out.note(
      `${h.nodeId} still reports it ${holdText(h)}: volume delete is refused until the node lets go (NodeUnstageVolume; its node-agent's healer, if it comes back)`,
    );
}

export interface NodeRemoveOptions {
  force?: boolean;
  authDir?: string;
}

/** The claims `nodeId` holds on the live volumes of the clusters in scope. */
async function claimsOf(s: Session, nodeId: string): Promise<NodeClaim[]> {
  const volumes = (await Promise.all(inScope(s).map((c) => clusterVolumes(s, c)))).flat();
  return volumes.filter((v) => v.claims.some((c) => c.nodeId === nodeId)).map((v) => ({ id: v.id, name: v.name }));
}

/** The JetStream manager that may purge a registration: the fleet user's own in the account layout, else csictl's. */
async function registryWriter(s: Session, authDir: string | undefined) {
  if (!s.accounts()) return jetstreamManager(await s.nats());
  return jetstreamManager(await s.nats({ kind: "fleet" }, authDir ? path.resolve(authDir) : undefined));
}

export async function nodeRemove(s: Session, nodeId: string, o: NodeRemoveOptions): Promise<number> {
  const reg = await nodeRegistration(fleetManager(await s.nats(), s.fleet()), nodeId);
  if (!reg) throw new CliError(EXIT.failed, `NOT_FOUND: node ${JSON.stringify(nodeId.slice(0, 128))} has no registration (csictl nodes lists them)`);
  const health = nodeHealth(reg, new Date());
  const claims = o.force ? [] : await claimsOf(s, nodeId);
  const refusal = removalRefusal(health, claims, !!o.force);
  if (refusal) throw new CliError(EXIT.failed, refusal);
  const jsm = await registryWriter(s, o.authDir);
  const { purged } = await jsm.streams.purge(NODES_STREAM, { filter: nodeSubjects.registration(nodeId) });
  s.out.result({ nodeId, removed: true, purged, wasHealthy: health.healthy }, () =>
    fields([
      ["NODE", nodeId],
      ["REMOVED", "yes"],
      ["LAST HEARTBEAT", reg.time],
    ]),
  );
  s.out.note(
    health.healthy
      ? `removed ${nodeId}: it was healthy and registers again at its next heartbeat unless its node-agent is stopped`
      : `removed ${nodeId}: csictl nodes no longer lists it${o.force ? " (claims it held stay: verify lists them, volume detach releases them)" : ""}`,
  );
  return EXIT.ok;
}
