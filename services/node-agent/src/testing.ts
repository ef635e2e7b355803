/**
 * Entry `@csi/node-agent/testing`: for the tests (test/, tools/testkit's machine helpers), the
 * benchmark and the chaos harness — the node-agent's device, mount and state-file adapters and its
 * node service, driven directly. Nothing of the running service imports it. When a module moves
 * inside the node-agent, only this list changes.
 */

export { claimChecker } from "./adapters/claims.js";
export { run } from "./adapters/exec.js";
export { blockDeviceSize, detectFs, growFs, makeFs, stats } from "./adapters/filesystem.js";
export { FuseMapping } from "./adapters/fuse-mapping.js";
export { attach, detach, findByBackingFile, type LoopDevice, list, refreshSize } from "./adapters/loop.js";
export { LoopMapping } from "./adapters/loop-mapping.js";
export { bindMount, isMountPoint, mount, mountsAt, readMounts, unmount, validateMountFlags } from "./adapters/mount.js";
export { removeFile, removeIfEmptyDir, safeJoin } from "./adapters/paths.js";
export { StateFile } from "./adapters/state-file.js";
export { NodeService } from "./app/node-service.js";
export { Reporter } from "./app/reporter.js";
export { NODE_AGENT_SETTINGS } from "./config.js";
export { type MountEntry, parseMountInfo } from "./domain/mountinfo.js";
export { NodeState } from "./domain/node-state.js";
export { hasControlCharacter } from "./domain/paths.js";
export type { BlockMapping, MappedVolume, VolumeImage } from "./ports/mapping.js";
export { runWork, type Work } from "./rpc/node.js";
