/**
 * The CSI Node service and the NATS node work: every call is checked by one function,
 * `checkNodeCall`, from one table, `NODE_CHECKS`, in the order the CSI spec's error tables give
 * (before anything touches the machine), and then handed to the NodeService operation:
 *
 *   1. a required field is missing                        → INVALID_ARGUMENT
 *   2. the volume does not exist, or is not at the path   → NOT_FOUND
 *   3. the remaining arguments: paths absolute, clean, bounded, outside the forbidden roots,
 *      without symlinks (domain/paths.ts, NodeService.checkPath); the capability one we serve;
 *      the pod the kubelet names in NodePublishVolume's volume_context (podInfoOnMount)
 *                                                         → INVALID_ARGUMENT
 *   4. a field the call needs from an earlier step is unset
 *      (NodePublishVolume without staging_target_path)    → FAILED_PRECONDITION
 *
 * So NodeGetVolumeStats of an unknown volume at "some/path" is NOT_FOUND (the volume is not
 * there), while NodeStageVolume of a volume that exists, to "some/path", is INVALID_ARGUMENT.
 */
import {
  type Capability,
  DriverError,
  invalidArgument,
  type NodeQueueMessage,
  nodeWorkSubjects,
  type PodInfo,
  podInfoOf,
  quote,
  readerOnly,
  unsupported,
} from "@csi/contracts";
import { type CallContext, type Handlers, toCapability, type VolumeCapabilityMsg } from "@csi/runtime";
import type { z } from "zod";
import type { NodeService } from "../app/node-service.js";
import type { Origin } from "../app/reporter.js";

export const NODE_CAPABILITIES = ["STAGE_UNSTAGE_VOLUME", "EXPAND_VOLUME", "GET_VOLUME_STATS", "VOLUME_CONDITION", "SINGLE_NODE_MULTI_WRITER"] as const;

/** The fields of a Node call, whichever way it came (gRPC request or NATS work item), unchecked. */
export interface NodeArgs {
  volumeId?: string;
  stagingPath?: string;
  targetPath?: string;
  volumePath?: string;
  capability?: Capability;
  publishContext?: Record<string, string>;
  /** NodePublishVolume's volume_context: the kubelet names the pod there (csi.storage.k8s.io/pod.*). */
  volumeContext?: Record<string, string>;
}
type Field = "volumeId" | "stagingPath" | "targetPath" | "volumePath" | "capability";
type PathField = "stagingPath" | "targetPath" | "volumePath";

interface Rule {
  /** Missing → INVALID_ARGUMENT, first of all. */
  readonly required: readonly Field[];
  /**
   * Where the volume must be, else NOT_FOUND: "in-pool" = its image is in one of this node's
   * pools (or it is staged here); a path field = it is staged or published here at that path.
   * Without it an unknown volume is left to the operation (unstage/unpublish: nothing to undo).
   */
  readonly find?: "in-pool" | PathField;
  /** The paths the call uses: absolute and clean, else INVALID_ARGUMENT (checked when set). */
  readonly paths: readonly PathField[];
  /** Set by an earlier step the caller skipped → FAILED_PRECONDITION. */
  readonly needs?: readonly PathField[];
  /** The call names the pod it is for (volume_context), recorded with its report. */
  readonly pod?: true;
}

export const NODE_CHECKS = {
  NodeStageVolume: { required: ["volumeId", "stagingPath", "capability"], find: "in-pool", paths: ["stagingPath"] },
  NodeUnstageVolume: { required: ["volumeId", "stagingPath"], paths: ["stagingPath"] },
  NodePublishVolume: {
    required: ["volumeId", "targetPath", "capability"],
    find: "in-pool",
    paths: ["stagingPath", "targetPath"],
    needs: ["stagingPath"],
    pod: true,
  },
  NodeUnpublishVolume: { required: ["volumeId", "targetPath"], paths: ["targetPath"] },
  NodeExpandVolume: { required: ["volumeId", "volumePath"], find: "volumePath", paths: ["volumePath"] },
  NodeGetVolumeStats: { required: ["volumeId", "volumePath"], find: "volumePath", paths: ["volumePath"] },
} as const satisfies Record<string, Rule>;
export type NodeRpc = keyof typeof NODE_CHECKS;

type Needed<R extends NodeRpc> = (typeof NODE_CHECKS)[R] extends { needs: readonly (infer N extends Field)[] } ? N : never;
/** A call that passed its checks: the required (and needed) fields set, the paths clean. */
export type CheckedCall<R extends NodeRpc> = NodeArgs & { [K in (typeof NODE_CHECKS)[R]["required"][number] | Needed<R>]-?: NonNullable<NodeArgs[K]> } & {
  publishContext: Record<string, string>;
  /** The pod the call is for, when it names one (NodePublishVolume from the kubelet). */
  pod?: PodInfo;
};

/** How each transport names the fields in its error messages. */
export type FieldNames = Readonly<Record<Field, string>>;
export const CSI_FIELDS: FieldNames = {
  volumeId: "volume_id",
  stagingPath: "staging_target_path",
  targetPath: "target_path",
  volumePath: "volume_path",
  capability: "volume_capability",
};
export const WORK_FIELDS: FieldNames = {
  volumeId: "volumeId",
  stagingPath: "stagingPath",
  targetPath: "targetPath",
  volumePath: "volumePath",
  capability: "capability",
};

/** Where volumes are (the NOT_FOUND step) and which paths are valid here (INVALID_ARGUMENT): the NodeService answers. */
export interface VolumeFinder {
  requireInPool(volumeId: string, publishContext: Record<string, string>): Promise<void>;
  /** `path` is the clean path, or undefined when the given one (`shown`) is not a valid path. */
  requireAt(volumeId: string, path: string | undefined, shown: string): void;
  /** The clean form of a valid path, else undefined (its text only). */
  cleanPath(p: string): string | undefined;
  /** The clean form of a valid path, else INVALID_ARGUMENT (its text, then the machine: symlinks, pseudo filesystems). */
  checkPath(p: string, what: string): Promise<string>;
}

const isSet = (v: unknown) => v !== undefined && v !== null && v !== "";

/** Check one Node call in the spec's order (see the top of this file); returns it with clean paths. */
export async function checkNodeCall<R extends NodeRpc>(rpc: R, args: NodeArgs, names: FieldNames, volumes: VolumeFinder): Promise<CheckedCall<R>> {
  const rule: Rule = NODE_CHECKS[rpc];
  for (const f of rule.required) if (!isSet(args[f])) throw invalidArgument(`${names[f]} is required`);
  const volumeId = args.volumeId as string;
  const publishContext = args.publishContext ?? {};

  if (rule.find === "in-pool") await volumes.requireInPool(volumeId, publishContext);
  else if (rule.find) {
    const given = args[rule.find] as string;
    volumes.requireAt(volumeId, volumes.cleanPath(given), given);
  }

  // volume_context goes no further than the pod read from it (it may hold the kubelet's service account tokens).
  const { volumeContext: _context, ...rest } = args;
  const call: NodeArgs = { ...rest, publishContext };
  for (const f of rule.paths) {
    const p = args[f];
    if (isSet(p)) call[f] = await volumes.checkPath(p as string, names[f]);
  }
  const why = args.capability && unsupported(args.capability);
  if (why) throw invalidArgument(why);
  const pod = rule.pod ? podInfoOf(args.volumeContext) : undefined;

  for (const f of rule.needs ?? []) {
    if (!isSet(call[f]))
      throw new DriverError("FailedPrecondition", `${names[f]} is not set: this node stages volumes (STAGE_UNSTAGE_VOLUME), so NodeStageVolume comes first`);
  }
  return { ...call, ...(pod ? { pod } : {}) } as CheckedCall<R>;
}

/** The fields of any Node request, as the proto loader gives them (unset strings are ""). */
interface NodeRequest {
  volume_id?: string;
  staging_target_path?: string;
  target_path?: string;
  volume_path?: string;
  volume_capability?: VolumeCapabilityMsg | null;
  publish_context?: Record<string, string>;
  volume_context?: Record<string, string>;
}

/**
 * A Node request as NodeArgs: every field it has (the table decides which matter). A capability
 * without access mode or access type is refused here, as a missing required field.
 */
const argsOf = (req: NodeRequest): NodeArgs => ({
  volumeId: req.volume_id,
  stagingPath: req.staging_target_path,
  targetPath: req.target_path,
  volumePath: req.volume_path,
  capability: req.volume_capability ? toCapability(req.volume_capability) : undefined,
  publishContext: req.publish_context,
  volumeContext: req.volume_context,
});

/** `topology`: the node's segments (domain/rbd-mapping.ts, nodeTopology), the same as in its registration. */
export function nodeHandlers(svc: NodeService, info: { nodeId: string; maxVolumes: number; topology: Record<string, string> }): Handlers<"Node"> {
  const check = <R extends NodeRpc>(rpc: R, req: NodeRequest) => checkNodeCall(rpc, argsOf(req), CSI_FIELDS, svc);
  /** The step's reports carry the call's request id (x-request-id, or the one the server made). */
  const grpc = (ctx: CallContext): Origin => ({ via: "grpc", requestId: ctx.requestId });
  return {
    NodeGetInfo: async () => ({
      node_id: info.nodeId,
      max_volumes_per_node: String(info.maxVolumes),
      accessible_topology: { segments: info.topology },
    }),
    NodeGetCapabilities: async () => ({ capabilities: NODE_CAPABILITIES.map((type) => ({ rpc: { type } })) }),

    NodeStageVolume: async (req, ctx) => {
      await svc.stage({ ...(await check("NodeStageVolume", req)), origin: grpc(ctx) });
      return {};
    },

    NodeUnstageVolume: async (req, ctx) => {
      await svc.unstage({ ...(await check("NodeUnstageVolume", req)), origin: grpc(ctx) });
      return {};
    },

    NodePublishVolume: async (req, ctx) => {
      const c = await check("NodePublishVolume", req);
      await svc.publish({ ...c, readOnly: !!req.readonly || readerOnly(c.capability), origin: grpc(ctx) });
      return {};
    },

    NodeUnpublishVolume: async (req, ctx) => {
      await svc.unpublish({ ...(await check("NodeUnpublishVolume", req)), origin: grpc(ctx) });
      return {};
    },

    NodeExpandVolume: async (req, ctx) => {
      const bytes = await svc.expand({ ...(await check("NodeExpandVolume", req)), origin: grpc(ctx) });
      return { capacity_bytes: String(bytes) };
    },

    NodeGetVolumeStats: async (req) => {
      const s = await svc.stats(await check("NodeGetVolumeStats", req));
      const u = s.usage;
      const usage = !u
        ? []
        : u.kind === "block"
          ? [{ unit: "BYTES" as const, total: String(u.bytes.total), available: "0", used: "0" }]
          : [
              { unit: "BYTES" as const, total: String(u.bytes.total), available: String(u.bytes.available), used: String(u.bytes.used) },
              { unit: "INODES" as const, total: String(u.inodes.total), available: String(u.inodes.available), used: String(u.inodes.used) },
            ];
      return { usage, volume_condition: s.condition };
    },
  };
}

export type Work = z.output<typeof NodeQueueMessage>;

/** Who runs node work: this node's id, the subject the work came on, and whether this node holds a claim on a volume (adapters/claims.ts). */
export interface WorkRunner {
  nodeId: string;
  subject: string;
  claimed: (volumeId: string) => Promise<boolean>;
}

/**
 * NATS node work: the same checks (by the same table) and the same operations as kubelet's gRPC
 * calls — once it is sure the work is this node's: it came on this node's own subject, names this
 * node, and (work that uses a volume: stage, publish, limits) the volume's journal says this node
 * holds a claim on it. Anything else is refused (FailedPrecondition: the queue drops it, counts it
 * and logs it), never executed (docs/security.md, "Node work"). Letting go (unpublish, unstage)
 * needs no claim: it is what follows a claim's release; a let-go (`afterRelease`) is refused once
 * this node holds a claim again (it is stale).
 */
export async function runWork(svc: NodeService, w: Work, me: WorkRunner): Promise<void> {
  if (me.subject !== nodeWorkSubjects.forNode(me.nodeId) || w.nodeId !== me.nodeId)
    throw new DriverError(
      "FailedPrecondition",
      `work ${quote(w.id, 64)} is not this node's (for ${quote(w.nodeId, 64)} on ${quote(me.subject, 128)}): refused, not executed`,
    );
  const claimed = async () => {
    if (!(await me.claimed(w.volumeId)))
      throw new DriverError(
        "FailedPrecondition",
        `work ${quote(w.id, 64)}: this node holds no claim on volume ${quote(w.volumeId, 128)}: refused, not executed`,
      );
  };
  const origin: Origin = { via: "nats", requestId: w.id };
  if (w.op === "limits") {
    await claimed();
    return svc.limits({ volumeId: w.volumeId, mutableParameters: w.mutableParameters, seq: w.seq, origin });
  }
  const check = <R extends NodeRpc>(rpc: R) => checkNodeCall(rpc, { ...w }, WORK_FIELDS, svc);
  switch (w.op) {
    case "stage": {
      const checked = await check("NodeStageVolume");
      await claimed();
      return svc.stage({ ...checked, origin });
    }
    case "publish": {
      const checked = await check("NodePublishVolume");
      await claimed();
      return svc.publish({ ...checked, readOnly: w.readOnly, origin });
    }
    case "unpublish":
      return svc.unpublish({ ...(await check("NodeUnpublishVolume")), origin });
    case "unstage": {
      // A let-go (afterRelease: ControllerUnpublishVolume's) follows a claim's release; once this
      // node holds a claim again (the CO published the volume here anew), it is stale: the new
      // staging stays. Other unstage work (a front-end without kubelet) runs as NodeUnstage does.
      const checked = await check("NodeUnstageVolume");
      if (w.afterRelease && (await me.claimed(w.volumeId)))
        throw new DriverError(
          "FailedPrecondition",
          `work ${quote(w.id, 64)}: this node holds a claim on volume ${quote(w.volumeId, 128)} again: a stale let-go, not executed`,
        );
      return svc.unstage({ ...checked, origin });
    }
    default: {
      const never: never = w;
      throw new Error(`unknown node work ${JSON.stringify(never)}`);
    }
  }
}
