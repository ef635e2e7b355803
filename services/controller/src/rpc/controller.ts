/**
 * The CSI Controller service: the gRPC method names mapped to one named function per RPC
 * (rpc/volumes.ts, rpc/snapshots.ts), each reading top to bottom as csi-driver-host-path's
 * controllerserver.go does: validate (arguments before existence, as csi-sanity expects), look up
 * and route (the `clusterID` parameter on create, the volume id otherwise), act (the journal
 * command), answer (the CSI response). Stateless.
 *
 * What every call shares is not here but around it, once: the gRPC middleware and the error
 * mapping (runtime rpc/server.ts: request id, logs with secrets stripped, slow calls, DriverError
 * → gRPC code), CSI's size bounds (runtime withCsiBounds, wrapped in index.ts), the routing to
 * the journals (rpc/routing.ts). Size and placement are decided in domain/ (sizes.ts,
 * placement.ts).
 */
import type { Handlers } from "@csi/runtime";
import { type ControllerDeps, controllerServer, serving } from "./context.js";
import { createSnapshot, deleteSnapshot, getSnapshot, listSnapshots } from "./snapshots.js";
import {
  controllerExpandVolume,
  controllerGetVolume,
  controllerModifyVolume,
  controllerPublishVolume,
  controllerUnpublishVolume,
  createVolume,
  deleteVolume,
  getCapacity,
  listVolumes,
  validateVolumeCapabilities,
} from "./volumes.js";

export const CONTROLLER_CAPABILITIES = [
  "CREATE_DELETE_VOLUME",
  "PUBLISH_UNPUBLISH_VOLUME",
  "LIST_VOLUMES",
  "GET_CAPACITY",
  "CREATE_DELETE_SNAPSHOT",
  "LIST_SNAPSHOTS",
  "CLONE_VOLUME",
  "PUBLISH_READONLY",
  "EXPAND_VOLUME",
  "LIST_VOLUMES_PUBLISHED_NODES",
  "VOLUME_CONDITION",
  "GET_VOLUME",
  "SINGLE_NODE_MULTI_WRITER",
  "GET_SNAPSHOT",
  "MODIFY_VOLUME",
] as const;

export async function controllerGetCapabilities() {
  return { capabilities: CONTROLLER_CAPABILITIES.map((type) => ({ rpc: { type } })) };
}

export function controllerHandlers(deps: ControllerDeps): Handlers<"Controller"> {
  const cs = controllerServer(deps);
  const on = serving(cs);
  return {
    ControllerGetCapabilities: controllerGetCapabilities,
    CreateVolume: on(createVolume),
    DeleteVolume: on(deleteVolume),
    ControllerExpandVolume: on(controllerExpandVolume),
    ControllerModifyVolume: on(controllerModifyVolume),
    ControllerGetVolume: on(controllerGetVolume),
    ValidateVolumeCapabilities: on(validateVolumeCapabilities),
    ListVolumes: on(listVolumes),
    GetCapacity: on(getCapacity),
    ControllerPublishVolume: on(controllerPublishVolume),
    ControllerUnpublishVolume: on(controllerUnpublishVolume),
    CreateSnapshot: on(createSnapshot),
    DeleteSnapshot: on(deleteSnapshot),
    GetSnapshot: on(getSnapshot),
    ListSnapshots: on(listSnapshots),
  };
}
