/**
 * The plugin's identity, the same on every endpoint: CSI plugin capabilities describe the
 * plugin, not the process, so the controller and the node-agent report one set.
 */
import { fileURLToPath } from "node:url";

/** Plugin name: CSI requires ≤ 63 chars, domain-like. */
export const PLUGIN_NAME_RE = /^[a-zA-Z][A-Za-z0-9-._]{0,61}[a-zA-Z]$/;
export const PLUGIN_NAME = "nats.csi.event-driver.io";

/** PluginCapability entries: a service type, or `VOLUME_EXPANSION:<type>`. */
export const PLUGIN_CAPABILITIES = ["CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS", "GROUP_CONTROLLER_SERVICE", "VOLUME_EXPANSION:ONLINE"] as const;

/** The CSI v1 proto (package csi.v1) this driver speaks. */
export const CSI_PROTO_PATH = fileURLToPath(new URL("../proto/csi.proto", import.meta.url));
