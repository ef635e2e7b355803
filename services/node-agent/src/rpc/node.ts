/**
 * The CSI Node service: argument checks first (before anything touches the machine), then the
 * NodeService operation. Paths from the CO are used as given, but must be absolute and clean.
 */
import { invalidArgument, readerOnly, TOPOLOGY_KEY, unsupported } from "@csi/contracts";
import { type Handlers, type VolumeCapabilityMsg, required, toCapability } from "@csi/runtime";
import { validateCoPath } from "../adapters/paths.js";
import type { NodeService } from "../app/node-service.js";

export const NODE_CAPABILITIES = ["STAGE_UNSTAGE_VOLUME", "EXPAND_VOLUME", "GET_VOLUME_STATS", "VOLUME_CONDITION", "SINGLE_NODE_MULTI_WRITER"] as const;

const capabilityOf = (vc: VolumeCapabilityMsg | null) => {
  const c = toCapability(vc);
  const why = unsupported(c);
  if (why) throw invalidArgument(why);
  return c;
};

export function nodeHandlers(svc: NodeService, info: { nodeId: string; maxVolumes: number }): Handlers<"Node"> {
  return {
    NodeGetInfo: async () => ({
      node_id: info.nodeId,
      max_volumes_per_node: String(info.maxVolumes),
      accessible_topology: { segments: { [TOPOLOGY_KEY]: info.nodeId } },
    }),
    NodeGetCapabilities: async () => ({ capabilities: NODE_CAPABILITIES.map((type) => ({ rpc: { type } })) }),

    NodeStageVolume: async (req) => {
      required(req.volume_id, "volume_id");
      required(req.staging_target_path, "staging_target_path");
      const stagingPath = validateCoPath(req.staging_target_path, "staging_target_path");
      const capability = capabilityOf(req.volume_capability);
      await svc.stage({ volumeId: req.volume_id, stagingPath, capability, publishContext: req.publish_context ?? {}, via: "grpc" });
      return {};
    },

    NodeUnstageVolume: async (req) => {
      required(req.volume_id, "volume_id");
      required(req.staging_target_path, "staging_target_path");
      await svc.unstage({ volumeId: req.volume_id, stagingPath: validateCoPath(req.staging_target_path, "staging_target_path"), via: "grpc" });
      return {};
    },

    NodePublishVolume: async (req) => {
      required(req.volume_id, "volume_id");
      required(req.staging_target_path, "staging_target_path");
      required(req.target_path, "target_path");
      const stagingPath = validateCoPath(req.staging_target_path, "staging_target_path");
      const targetPath = validateCoPath(req.target_path, "target_path");
      const capability = capabilityOf(req.volume_capability);
      await svc.publish({ volumeId: req.volume_id, stagingPath, targetPath, readOnly: !!req.readonly || readerOnly(capability), via: "grpc" });
      return {};
    },

    NodeUnpublishVolume: async (req) => {
      required(req.volume_id, "volume_id");
      required(req.target_path, "target_path");
      await svc.unpublish({ volumeId: req.volume_id, targetPath: validateCoPath(req.target_path, "target_path"), via: "grpc" });
      return {};
    },

    NodeExpandVolume: async (req) => {
      required(req.volume_id, "volume_id");
      required(req.volume_path, "volume_path");
      if (req.volume_capability) capabilityOf(req.volume_capability);
      const bytes = await svc.expand({ volumeId: req.volume_id, volumePath: validateCoPath(req.volume_path, "volume_path"), via: "grpc" });
      return { capacity_bytes: String(bytes) };
    },

    NodeGetVolumeStats: async (req) => {
      required(req.volume_id, "volume_id");
      required(req.volume_path, "volume_path");
      const s = await svc.stats({ volumeId: req.volume_id, volumePath: validateCoPath(req.volume_path, "volume_path") });
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
