/**
 * `fleet init`: the FLEET account of the NATS account layout (docs/security.md) holds the node
 * registrations, the node work and every cluster's device reports. No running service may make
 * streams or consumers there (a push consumer can deliver anywhere in its account), so the
 * operator makes them once, as the fleet user, for the nodes and clusters the accounts were made
 * for — and again after adding a node (`auth init --force` with the new list, reload nats-server).
 */
import path from "node:path";
import { initFleet } from "@csi/runtime";
import { authLayout } from "../domain/auth-files.js";
import { usageError } from "../errors.js";
import { commaList, replicasOption } from "../options.js";
import { fields } from "../output.js";
import type { Session } from "../session.js";

export interface FleetInitOptions {
  authDir?: string;
  nodes?: string;
  clusters?: string;
  replicas?: string;
}

export async function fleetInit(s: Session, o: FleetInitOptions): Promise<void> {
  const replicas = replicasOption(o.replicas) ?? 1;
  const dir = o.authDir ? path.resolve(o.authDir) : undefined;
  let layout: { clusters: string[]; nodes: string[] };
  if (dir) {
    if (o.nodes || o.clusters) throw usageError("--auth-dir names the nodes and clusters: not with --nodes or --clusters");
    try {
      layout = authLayout(dir);
    } catch (err) {
      throw usageError(`${dir}: ${(err as Error).message} (made by csictl auth init)`);
    }
  } else {
    layout = { nodes: commaList(o.nodes), clusters: o.clusters ? commaList(o.clusters) : s.clusters().clusters.map((c) => c.clusterID) };
    if (layout.nodes.length === 0) throw usageError("--nodes (or --auth-dir) names the nodes whose work consumers to make");
  }
  const nc = await s.nats({ kind: "fleet" }, dir);
  await initFleet(nc, layout.clusters, layout.nodes, { replicas });
  s.out.result({ clusters: layout.clusters, nodes: layout.nodes, replicas }, () =>
    fields([
      ["CLUSTERS", layout.clusters.join(", ")],
      ["NODES", layout.nodes.join(", ")],
      ["REPLICAS", replicas],
    ]),
  );
}
